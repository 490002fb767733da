"""``genwire report OUTPUT``: the report page of a run, from its checkpoint (SPEC §19).

A run writes ``<output>.report.html`` itself whenever it ends; this command writes it for
a run that did not finish (interrupted, killed, stopped) from what its checkpoint holds
— every session's metrics, the kept rows, the failed rows — or points at the report a
finished run left. Heavy imports stay inside the function: registering costs nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from genwire.cli.errors import handle_errors

__all__ = ["report"]


@click.command()
@click.argument("output", type=click.Path(dir_okay=False, path_type=Path))
@handle_errors
def report(output: Path) -> None:
    """Write OUTPUT.report.html for the run writing OUTPUT (e.g. an unfinished one)."""
    from genwire.engine.records.checkpoint import checkpoint_dir
    from genwire.engine.report import report_path, write_report

    directory = checkpoint_dir(output)
    page = report_path(output)
    if not directory.is_dir():
        if page.is_file():
            click.echo(f"the run finished (its checkpoint is gone); its report is {page}")
            return
        click.echo(
            f"error: no run of {output}: neither a checkpoint {directory} nor a report {page}; give the dataset "
            "path a run writes (its pipeline.output, or the -o it was given)",
            err=True,
        )
        sys.exit(2)
    try:
        written = write_report(output)
    except OSError as exc:
        click.echo(f"error: cannot write the report {page}: {exc.strerror or exc}", err=True)
        sys.exit(2)
    click.echo(f"report written to {written}")
