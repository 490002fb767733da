"""A command's text printed on stdout, or written to the file its ``-o`` names."""

from __future__ import annotations

from pathlib import Path

import click

from genwire.errors import RunSetupError


def print_or_write(text: str, target: Path | None, what: str) -> None:
    """``text`` to stdout (``target`` None) or into ``target``; ``what`` names it in the
    error a file that cannot be written gives (exit 2)."""
    if target is None:
        click.echo(text, nl=False)
        return
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise RunSetupError(f"{target}: cannot write {what} there: {exc.strerror or exc}") from None
    click.echo(f"wrote {target}", err=True)
