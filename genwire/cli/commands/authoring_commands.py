"""The commands for writing a pipeline and its plugins: ``init`` (a starter project),
``schema`` (genwire.yaml's JSON Schema, for editors) and ``lint`` (plugin code's slots)."""

from __future__ import annotations

from pathlib import Path

import click

from genwire.cli.consoles import out
from genwire.cli.errors import handle_errors

__all__ = ["init", "lint", "schema"]


@click.command()
@click.argument("targets", nargs=-1, required=True, metavar="FILE_OR_MODULE...")
@click.option("--json", "as_json", is_flag=True, help="Print the generators checked and the findings as JSON.")
def lint(targets: tuple[str, ...], as_json: bool) -> None:
    """Check plugin code: every resource slot a generator uses must be declared (exit 1 if not)."""
    from genwire.cli.commands.lint_command import lint_targets

    lint_targets(targets, as_json)


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), default=".")
@click.option("--force", is_flag=True, help="Overwrite an existing genwire.yaml (and genwire.schema.json).")
@handle_errors
def init(directory: Path, force: bool) -> None:
    """Write a starter genwire.yaml and sample documents that run offline."""
    from genwire.cli.starter import write_starter

    for path in write_starter(directory, force=force):
        out.print(f"wrote {path}", markup=False)
    out.print(f"next: genwire run {directory / 'genwire.yaml'}", markup=False)


@click.command()
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the schema to this file instead of stdout.",
)
@handle_errors
def schema(output: Path | None) -> None:
    """Print the JSON Schema of genwire.yaml (for editors: genwire init writes the line that uses it)."""
    from genwire.cli.text_output import print_or_write
    from genwire.config.json_schema import schema_text

    print_or_write(schema_text(), output, "the schema")
