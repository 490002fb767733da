"""The genwire command line: the ``genwire`` group and the registration of its commands,
each defined in the module of its role (errors.py says how a command ends: one clear
message, exit 2 invalid input, 1 a failed check or run; ``--debug`` shows the traceback).

Start-up is part of the product: this module and the command modules import click and
the standard library only; each command imports what it needs when it runs (``validate``
and ``plan`` never load the engine, aiohttp or rich's live display; ``--version`` and
``--help`` load none of genwire's machinery). tests/test_startup_imports.py keeps it so."""

from __future__ import annotations

import click

from genwire.cli.commands.authoring_commands import init, lint, schema
from genwire.cli.commands.batch_commands import batches
from genwire.cli.commands.cache_commands import cache
from genwire.cli.commands.check_commands import plan, plugins, validate
from genwire.cli.commands.handoff_commands import card, export_command, push_command
from genwire.cli.commands.preflight_command import preflight
from genwire.cli.commands.report_command import report
from genwire.cli.commands.run_command import estimate, run
from genwire.cli.commands.serve_command import serve
from genwire.cli.errors import handle_errors, run_cli
from genwire.version import __version__

__all__ = ["cli", "handle_errors", "main", "run_cli"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.version_option(__version__, prog_name="genwire")  # not package_name: importlib.metadata costs
def cli(debug: bool) -> None:
    """genwire: each generator wired with exactly the resources it declares, and every
    wired model and dataset checked before generation starts."""
    from genwire.scrub import show_tracebacks

    show_tracebacks(debug)  # libraries' log records keep their (scrubbed) tracebacks only then


COMMANDS: tuple[click.Command, ...] = (
    validate,
    plan,
    plugins,
    preflight,
    run,
    estimate,
    cache,
    batches,  # answers its own errors (batch_commands._command): no handle_errors
    report,
    serve,  # managed servers (SPEC §23)
    card,  # the hand-off (SPEC §24)
    export_command,
    push_command,
    lint,
    init,
    schema,
)
for _command in COMMANDS:
    cli.add_command(_command)


def main() -> None:
    """``python -m genwire.cli.main`` and older console scripts: the same start-up as the
    console script's tiny entry module (which imports this one: it never imports entry)."""
    from genwire.cli.exits import start_process

    run_cli(cli, start_process(None))


if __name__ == "__main__":
    main()
