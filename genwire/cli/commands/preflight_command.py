"""``genwire preflight``: every model and dataset a wired generator can reach, checked
concurrently (SPEC §6), or every model alias of a Data Designer setup; an interrupt still
reports the checks that had finished."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from genwire.cli.consoles import out
from genwire.cli.errors import handle_errors
from genwire.cli.exits import emit_json, exit_on_signals, signal_exit_code
from genwire.cli.loading import failure_text, or_report, wire_or_report
from genwire.cli.numbers import FiniteFloatRange
from genwire.errors import plural

if TYPE_CHECKING:
    from genwire.preflight.report import CheckResult

__all__ = ["preflight"]


@click.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the machine-readable report.")
@click.option("--no-cache", is_flag=True, help="Probe everything, ignoring the probe cache.")
@click.option(
    "--data-designer",
    "data_designer",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[DIR]",
    help="Check a Data Designer setup instead of FILE: its model_providers.yaml and model_configs.yaml "
    "in DIR, else $DATA_DESIGNER_HOME, else ~/.data-designer.",
)
@click.option(
    "--config",
    "pipeline",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --data-designer: a Data Designer pipeline config; only the aliases its columns name are checked.",
)
@click.option(
    "--cache-ttl",
    type=FiniteFloatRange(min=0),
    help="With --data-designer: seconds an ok probe is trusted from the probe cache (default 0, off).",
)
@click.option(
    "--batch", is_flag=True, help="Also check every openai provider's Files and Batches API, as `run --batch` would."
)
@handle_errors
def preflight(
    file: Path | None,
    as_json: bool,
    no_cache: bool,
    data_designer: str | None,
    pipeline: Path | None,
    cache_ttl: float | None,
    batch: bool,
) -> None:
    """Check every model and dataset a wired generator can reach, concurrently (or, with
    --data-designer, every model alias of a Data Designer setup)."""
    import time

    from genwire.cli.signals import Interrupted, run_interruptibly

    empty = {"ok": False, "duration_s": 0.0, "checks": []}  # the report's keys: no check ran
    finished: list[CheckResult] = []  # checks as they finish: what an interrupt can still report
    started = time.perf_counter()
    try:
        if data_designer is not None:
            if file is not None:
                raise click.UsageError("give FILE or --data-designer, not both")
            if batch:
                raise click.UsageError("--batch goes with FILE, not --data-designer")
            report = or_report(
                lambda: _data_designer_preflight(data_designer, pipeline, cache_ttl or 0.0, use_cache=not no_cache),
                as_json,
                empty,
            )
        else:
            if file is None:
                raise click.UsageError("missing FILE (or --data-designer [DIR] to check a Data Designer setup)")
            if pipeline is not None or cache_ttl is not None:
                raise click.UsageError(
                    "--config and --cache-ttl go with --data-designer (genwire.yaml has preflight.cache_ttl_s)"
                )
            container = wire_or_report(file, as_json, empty)
            from genwire.preflight.batch_check import batch_providers
            from genwire.preflight.runner import run_preflight

            # Providers with batch.enabled (all openai ones with --batch): their Files and
            # Batches endpoints too, as the run checks them.
            batching = batch_providers(container, forced=batch)

            async def go() -> Any:
                async with container:
                    return await run_preflight(
                        container, use_cache=not no_cache, on_check=finished.append, batch_providers=batching
                    )

            report = run_interruptibly(go())
    except (Interrupted, KeyboardInterrupt) as exc:
        exit_on_signals()
        if as_json:
            emit_json(
                {
                    **failure_text("interrupted"),
                    "duration_s": round(time.perf_counter() - started, 4),
                    "checks": [c.model_dump(mode="json") for c in finished],
                }
            )
        sys.stderr.write(f"interrupted: {plural(len(finished), 'check')} had finished\n")
        sys.exit(exc.exit_code if isinstance(exc, Interrupted) else signal_exit_code(getattr(exc, "signum", 2)))
    if as_json:
        emit_json(report.model_dump(mode="json"), indent=2)
    else:
        from genwire.cli.render import preflight_table

        out.print(preflight_table(report))
    if report.warning():
        sys.stderr.write(f"{report.warning()}\n")
    if not report.ok:
        sys.exit(1)


def _data_designer_preflight(directory: str, pipeline: Path | None, cache_ttl_s: float, *, use_cache: bool) -> Any:
    """The pre-flight of a Data Designer setup; the command line is where the process's
    environment and home directory come in."""
    import os

    from genwire.config.data_designer import data_designer_dir, load_data_designer
    from genwire.preflight.data_designer import preflight_data_designer

    where = data_designer_dir(Path(directory) if directory else None, env=os.environ, home=Path.home())
    setup = load_data_designer(where, env=os.environ, pipeline=pipeline, cache_ttl_s=cache_ttl_s)
    from genwire.cli.signals import run_interruptibly

    return run_interruptibly(preflight_data_designer(setup, use_cache=use_cache))
