"""The console script's entry point, kept tiny: it takes Ctrl-C and SIGTERM over from
Python's defaults as its first act, before click or any of genwire's machinery is
imported (exits.py says what a signal does then). Import it only to run the command line."""

from __future__ import annotations

from genwire.cli.exits import take_signals

take_signals()

import sys  # noqa: E402  (after the handlers: nothing before them but the package itself)
from collections.abc import Sequence  # noqa: E402

from genwire.cli.exits import collect_less_while_starting, divert_stdout, want_json, wants_json  # noqa: E402


def main(argv: Sequence[str] | None = None) -> None:
    take_signals()  # again: the handlers may have been changed since this module was imported
    collect_less_while_starting()
    args = list(sys.argv[1:] if argv is None else argv)
    want_json(args)
    if wants_json(args):
        divert_stdout()  # before any plugin is imported: what plugins print goes to stderr
    from genwire.cli.main import cli, run_cli

    run_cli(cli, args)


if __name__ == "__main__":
    main()
