"""``genwire run`` and ``genwire estimate``: the two commands that generate rows (estimate
its first K, kept for the run). How each run ends is said here: the summary and cost
table, the JSON summary, a budget stop (exit 3), an interrupt with what was kept."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import click

from genwire.cli.consoles import LazyConsole, err, out
from genwire.cli.errors import handle_errors
from genwire.cli.exits import emit_json, steady_gc
from genwire.cli.loading import FILE, boot_or_report, failure, failure_text
from genwire.cli.numbers import FiniteFloatRange
from genwire.errors import GenwireError

__all__ = ["estimate", "run"]


F = TypeVar("F", bound=Callable[..., Any])


def _on_ray(command: F) -> F:
    """``--address`` and ``--workers``, after ``--engine``: where run and estimate go on Ray."""
    command = click.option(
        "--workers", type=click.IntRange(min=1), help="Ray workers (with --engine ray; default: one per cluster CPU)."
    )(command)
    return click.option("--address", help="Ray cluster address (with --engine ray).")(command)


class _RowCount(click.ParamType):  # type: ignore[type-arg]
    """``-n``: a whole number of rows (``1e6`` is a million), 1 to ``MAX_NUM_RECORDS``; a
    count no row index can number is refused naming it and the limit."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            n = value
        else:
            try:
                n = int(value)
            except ValueError:
                n = self._whole(str(value), param, ctx)
        if n < 1:
            self.fail(f"{value} rows: give at least 1", param, ctx)
        from genwire.config.limits import too_many_rows  # --help and --version load no config module

        problem = too_many_rows(n)
        if problem:
            self.fail(f"{value}: {problem}", param, ctx)
        return n

    def _whole(self, text: str, param: click.Parameter | None, ctx: click.Context | None) -> int:
        import decimal

        try:
            number = decimal.Decimal(text.strip())
        except decimal.InvalidOperation:
            number = decimal.Decimal("NaN")
        if not number.is_finite() or number != number.to_integral_value():
            self.fail(f"{text!r} is not a whole number of rows", param, ctx)
        return int(number)


def _output_suffix(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    from genwire.config.schema import output_suffix_problem

    problem = output_suffix_problem(str(value)) if value is not None else None
    if problem:
        raise click.BadParameter(problem)
    return value


@click.command()
@FILE
@click.option("-n", "num_records", type=_RowCount(), help="Rows to generate (default: pipeline.num_records).")
@click.option(
    "-o",
    "output",
    type=click.Path(dir_okay=False, path_type=Path),
    callback=_output_suffix,
    help="Output file (.jsonl, .csv, .parquet).",
)
@click.option("--skip-preflight", is_flag=True, help="Generate without checking resources first.")
@click.option(
    "--fresh",
    is_flag=True,
    help="Discard the checkpoint of an earlier run and start over (a finished output is made again).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON summary on stdout (progress goes to stderr).")
@click.option("--no-cache", is_flag=True, help="Probe everything, ignoring the probe cache.")
@click.option(
    "--no-response-cache",
    is_flag=True,
    help="Ask the models for every answer; neither read nor write the response cache.",
)
@click.option(
    "--batch", is_flag=True, help="Send model calls through the Batch API (half price, hours); openai providers only."
)
@click.option(
    "--max-cost",
    type=FiniteFloatRange(min=0, min_open=True),
    help="Stop (exit 3) before spending more than this many USD; a higher cap on the same command goes on.",
)
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True)
@_on_ray
@handle_errors
def run(
    file: Path,
    num_records: int | None,
    output: Path | None,
    skip_preflight: bool,
    fresh: bool,
    as_json: bool,
    no_cache: bool,
    no_response_cache: bool,
    batch: bool,
    max_cost: float | None,
    engine: Literal["local", "ray"],
    address: str | None,
    workers: int | None,
) -> None:
    """Pre-flight, then generate the dataset, checkpointing as it goes; rerun to resume."""
    from genwire.cli.render import RichProgress, report_note, show_preflight
    from genwire.cli.signals import Interrupted, run_interruptibly
    from genwire.engine.records.checkpoint import checkpoint_dir, kept_rows
    from genwire.engine.run.conductor import output_path
    from genwire.errors import BudgetStopped, RunStopped
    from genwire.preflight.report import PreflightError

    began = time.time()
    container = boot_or_report(file, as_json, {})
    console = err if as_json else out  # --json: stdout holds the summary only
    target = output_path(container, output)

    def say_report() -> None:  # every ending of a run says where its report page is
        note = report_note(target, began)
        if note is not None:
            err.print(note, markup=False)

    if batch:
        from genwire.cli.commands.batch_commands import local_provider_notes

        for note in local_provider_notes(container):
            console.print(note, markup=False)

    async def go() -> Any:
        async with container:
            return await container.run(
                num_records,
                output=output,
                skip_preflight=skip_preflight,
                progress=RichProgress(console),
                engine=engine,
                resume=not fresh,
                ray_address=address,
                ray_workers=workers,
                on_preflight=lambda report: show_preflight(console, report),
                probe_cache=not no_cache,
                response_cache=not no_response_cache,
                batch=batch,
                max_cost_usd=max_cost,
            )

    steady_gc()  # generation makes garbage all along: the collector's usual pace
    try:
        result = run_interruptibly(go(), fast_loop=True)
    except Interrupted as exc:
        total = num_records or container.config.pipeline.num_records
        directory = checkpoint_dir(target)
        kept = kept_rows(directory)
        if as_json:
            emit_json({**failure_text("interrupted"), "rows_kept": kept, "checkpoint": str(directory)})
        from genwire.cli.commands.batch_commands import interrupted_hint
        from genwire.cli.render import interrupted_message
        from genwire.engine.run.session import response_cache_dir

        cached = response_cache_dir(container, not no_response_cache) is not None
        message = interrupted_message(directory, kept, total, response_cache=cached)
        page = report_note(target, began)
        if page is not None:  # an interrupt says it in one line: the page's place in it
            message += f"; {page}"
        hint = interrupted_hint(file, directory)  # batch mode: batches left running
        if hint:
            message = message.replace("; nothing to resume", "") + "\n" + hint
        err.print(message, markup=False)
        sys.exit(exc.exit_code)
    except GenwireError as exc:
        if as_json:  # stdout holds one JSON object whatever happened; the message also goes to stderr
            summary = failure(exc)
            if isinstance(exc, BudgetStopped) and exc.result is not None:  # what it spent, as at a finished run
                summary = {**exc.result.summary(), **summary}
            if isinstance(exc, RunStopped | BudgetStopped):
                summary.update(rows_kept=exc.kept, checkpoint=str(exc.checkpoint))
            if isinstance(exc, BudgetStopped):
                summary.update(spent_usd=exc.spent_usd, max_cost_usd=exc.cap_usd, **(exc.funnel or {}))
            if isinstance(exc, PreflightError):
                summary["preflight"] = exc.report.model_dump(mode="json")
            emit_json(summary)
        say_report()
        if isinstance(exc, BudgetStopped):
            if exc.result is not None and not as_json:
                _show_run(out, exc.result)
            err.print(str(exc), markup=False)
            sys.exit(3)
        raise
    if result.already_complete:  # a finished output, untouched: nothing sent, nothing written
        from genwire.cli.render import already_complete

        if as_json:
            emit_json(result.summary())
        console.print(already_complete(result), markup=False)
        return
    if as_json:
        emit_json(result.summary())
        say_report()
        return
    _show_run(out, result)
    click.echo(f"dataset written to {result.output}")
    page = report_note(result.output, began)
    if page is not None:
        click.echo(page)


def _show_run(console: LazyConsole, result: Any) -> None:
    """The run summary and the cost table: at a finished run and at a budget stop alike."""
    from genwire.cli.commands.estimate_command import cost_table
    from genwire.cli.render import run_summary

    console.print(run_summary(result))
    cached = sum(u.cached for u in result.usage.values())
    console.print(cost_table(result.cost, resumed=result.rows_resumed > 0, cached=cached))


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "-k",
    "sample",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Rows generated for real (kept: the run continues after them).",
)
@click.option("-n", "num_records", type=click.IntRange(min=1), help="Rows of the run (default: pipeline.num_records).")
@click.option("-o", "output", type=click.Path(dir_okay=False, path_type=Path), help="The run's output file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--batch", is_flag=True, help="Estimate a --batch run: batch prices, within the completion window.")
@click.option("--no-cache", is_flag=True, help="Probe everything, ignoring the probe cache.")
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where the sample runs, and the run is projected (ray: on the cluster's workers).",
)
@_on_ray
@handle_errors
def estimate(
    file: Path,
    sample: int,
    num_records: int | None,
    output: Path | None,
    as_json: bool,
    batch: bool,
    no_cache: bool,
    engine: Literal["local", "ray"],
    address: str | None,
    workers: int | None,
) -> None:
    """What the run will cost and take: the first K rows for real, kept, and the rest projected."""
    from genwire.cli.commands.estimate_command import run_estimate

    container = boot_or_report(file, as_json, {})
    run_estimate(
        container,
        file,
        sample,
        num_records,
        output,
        as_json,
        batch,
        no_cache,
        engine=engine,
        ray_address=address,
        ray_workers=workers,
    )
