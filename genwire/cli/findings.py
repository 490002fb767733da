"""The static check's findings of a booted pipeline, printed on stderr. Apart from
``lint_command``: validate, plan, preflight and run print them without loading the lint
command's machinery (its file and module importers)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click


def report_findings(columns: Iterable[Any]) -> None:
    """Print the static check's warnings and notes of a booted pipeline's columns on
    stderr (``warning: file:line:col: ...``); they never change the exit code."""
    for f in dict.fromkeys(f for c in columns for f in c.source_findings):
        click.echo(str(f), err=True)
