"""``validate``, ``plan`` and ``plugins``: the checks that need no network. They wire the
pipeline without the engine (tests/test_startup_imports.py keeps it so)."""

from __future__ import annotations

from pathlib import Path

import click

from genwire.cli.consoles import out
from genwire.cli.errors import handle_errors
from genwire.cli.loading import FILE, wire
from genwire.errors import PluginError, plural

__all__ = ["plan", "plugins", "validate"]


@click.command()
@FILE
@handle_errors
def validate(file: Path) -> None:
    """Check config, plugins and wiring. No network."""
    container = wire(file)
    plan = container.plan()
    click.echo(
        f"{file}: valid — {plural(len(plan.columns), 'column')}, {plural(len(plan.targets), 'pre-flight target')}"
        + (f", {plural(len(plan.unreachable), 'resource')} reached by no column" if plan.unreachable else "")
    )


@click.command()
@FILE
@click.option("--format", "fmt", type=click.Choice(["table", "json", "mermaid"]), default="table", show_default=True)
@handle_errors
def plan(file: Path, fmt: str) -> None:
    """Show each column's generator and slot bindings, and the pre-flight targets."""
    from genwire.cli.render import plan_mermaid, plan_table

    wiring = wire(file).plan()
    if fmt == "json":
        click.echo(wiring.model_dump_json(indent=2))
    elif fmt == "mermaid":
        click.echo(plan_mermaid(wiring))
    else:
        for table in plan_table(wiring):
            out.print(table)


@click.command()
@handle_errors
def plugins() -> None:
    """List discovered generators with their declared resources."""
    from genwire.cli.render import plugins_table
    from genwire.generators.discovery import discover

    found = discover()
    out.print(plugins_table(found.generators, found.origins))
    if found.problems:
        raise PluginError(found.problems)
