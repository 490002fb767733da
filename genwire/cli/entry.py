"""The console script's entry point, kept tiny: it takes Ctrl-C and SIGTERM over from
Python's defaults as its first act, before click or any of genwire's machinery is
imported (exits.py says what a signal does then). Import it only to run the command line."""

from __future__ import annotations

from genwire.cli.exits import take_signals

take_signals()

from collections.abc import Sequence  # noqa: E402  (after the handlers: nothing before them but the package)

from genwire.cli.exits import start_process  # noqa: E402


def main(argv: Sequence[str] | None = None) -> None:
    args = start_process(argv)
    from genwire.cli.main import cli, run_cli

    run_cli(cli, args)


if __name__ == "__main__":
    main()
