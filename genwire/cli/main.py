"""The genwire command line. Errors are one clear message (exit 2 invalid input, 1 failed
check or run); ``--debug`` shows the traceback.

Start-up is part of the product: this module imports click and the standard library
only; each command imports what it needs when it runs (``validate`` and ``plan`` never
load the engine, aiohttp or rich's live display; ``--version`` and ``--help`` load none
of genwire's machinery). tests/test_startup_imports.py keeps it so."""

from __future__ import annotations

import functools
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar, cast

import click

from genwire.cli.consoles import LazyConsole
from genwire.cli.exits import (
    emit_json,
    emit_json_failure,
    exit_on_signals,
    exit_status,
    finishing,
    raise_on_signals,
    signal_exit_code,
    start_command,
    steady_gc,
    write_json,
)
from genwire.cli.numbers import FiniteFloatRange
from genwire.errors import ConfigError, GenwireError, PluginError, ProblemsError, RunSetupError, WiringError, plural
from genwire.version import __version__

if TYPE_CHECKING:
    from genwire.container.core import WiredPipeline
    from genwire.preflight.report import CheckResult

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


out = LazyConsole(highlight=False, soft_wrap=False, wide_when_piped=True)
err = LazyConsole(stderr=True, highlight=False, soft_wrap=True)

_INVALID = (ConfigError, WiringError, PluginError, RunSetupError)


def _fail(message: str, code: int) -> NoReturn:
    emit_json_failure(message)  # --json: stdout holds one object whatever happened
    err.print("error: " + message, markup=False)
    sys.exit(code)


def _interrupted(exc: BaseException | None) -> NoReturn:
    """Ctrl-C (130) or SIGTERM (143): one line, and under --json the object saying so."""
    exit_on_signals()  # a second signal while leaving ends the process at once
    signum = getattr(exc, "signum", signal.SIGINT)
    emit_json_failure("interrupted")
    sys.stderr.write("interrupted\n")
    sys.exit(signal_exit_code(signum))


def run_cli(group: click.Group, args: Sequence[str]) -> NoReturn:
    """Run the command line and exit. Click's usage errors (exit 2) are shown as click
    shows them, and under ``--json`` also as the one JSON object on stdout."""
    try:
        try:
            result = group.main(list(args), prog_name="genwire", standalone_mode=False)
        except click.ClickException as exc:
            emit_json_failure(exc.format_message())
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort as exc:  # an interrupt that reached click (its prompts, its teardown)
            _interrupted(exc.__cause__)
        except KeyboardInterrupt as exc:
            _interrupted(exc)
        except Exception as exc:  # a bug: its traceback follows, and --json still gets its object
            emit_json_failure(f"internal error: {type(exc).__name__}: {exc}")
            raise
        sys.exit(result if isinstance(result, int) else 0)
    except SystemExit as exc:
        code = exit_status(exc)
        if code != 0:
            emit_json_failure(f"exit status {code}")
        finishing(code)
        raise


def handle_errors(fn: F) -> F:
    """One message per error, no traceback unless --debug; the exit code says what kind."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = click.get_current_context().find_root().params.get("debug", False)
        start_command()
        raise_on_signals()  # from here a signal unwinds the command (clients close), see exits.py
        try:
            try:
                result = fn(*args, **kwargs)
            except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM as exits.Terminated
                if debug:
                    raise
                _interrupted(exc)
            except _INVALID as exc:
                if debug:
                    raise
                _fail(str(exc), 2)
            except GenwireError as exc:
                if debug:
                    raise
                _fail(str(exc), 1)
        except SystemExit as exc:
            finishing(exit_status(exc))  # the outcome is decided: a late signal keeps it
            raise
        except BaseException:
            exit_on_signals()
            raise
        finishing(0)
        return result

    return cast(F, wrapper)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.version_option(__version__, prog_name="genwire")  # not package_name: importlib.metadata costs
def cli(debug: bool) -> None:
    """genwire: each generator wired with exactly the resources it declares, and every
    wired model and dataset checked before generation starts."""
    from genwire.scrub import show_tracebacks

    show_tracebacks(debug)  # libraries' log records keep their (scrubbed) tracebacks only then


_FILE = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))


def _boot(file: Path) -> Any:
    """The full container (``run``): its ``run`` brings in the engine."""
    from genwire.app import boot
    from genwire.cli.findings import report_findings

    container = boot(file)
    report_findings(container.columns)  # the static check's warnings and notes, on stderr
    return container


def _wire(file: Path) -> WiredPipeline:
    """The wired pipeline without the engine: what validate, plan and preflight need."""
    from genwire.cli.findings import report_findings
    from genwire.container.boot import boot_container
    from genwire.container.core import WiredPipeline

    container = boot_container(file, WiredPipeline)
    report_findings(container.columns)  # the static check's warnings and notes, on stderr
    return container


def _failure(exc: GenwireError) -> dict[str, Any]:
    """The ``--json`` object of a failure: the message, and each located problem apart."""
    problems = exc.problems if isinstance(exc, ProblemsError) else [str(exc)]
    return {"ok": False, "error": str(exc), "errors": problems}


def _failure_text(message: str) -> dict[str, Any]:
    return {"ok": False, "error": message, "errors": [message]}


def _boot_or_report(file: Path, as_json: bool, report: dict[str, Any]) -> Any:
    return _or_report(lambda: _boot(file), as_json, report)


def _wire_or_report(file: Path, as_json: bool, report: dict[str, Any]) -> WiredPipeline:
    return _or_report(lambda: _wire(file), as_json, report)


def _or_report(make: Callable[[], T], as_json: bool, report: dict[str, Any]) -> T:
    """``make()``, or with ``--json`` print ``report`` plus the failure first (stdout always
    holds one JSON object), then fail as usual (exit 2 for an invalid config)."""
    try:
        return make()
    except GenwireError as exc:
        if as_json:
            emit_json({**report, **_failure(exc)})
        raise


@cli.command()
@_FILE
@handle_errors
def validate(file: Path) -> None:
    """Check config, plugins and wiring. No network."""
    container = _wire(file)
    plan = container.plan()
    click.echo(
        f"{file}: valid — {plural(len(plan.columns), 'column')}, {plural(len(plan.targets), 'pre-flight target')}"
        + (f", {plural(len(plan.unreachable), 'resource')} reached by no column" if plan.unreachable else "")
    )


@cli.command()
@_FILE
@click.option("--format", "fmt", type=click.Choice(["table", "json", "mermaid"]), default="table", show_default=True)
@handle_errors
def plan(file: Path, fmt: str) -> None:
    """Show each column's generator and slot bindings, and the pre-flight targets."""
    from genwire.cli.render import plan_mermaid, plan_table

    wiring = _wire(file).plan()
    if fmt == "json":
        click.echo(wiring.model_dump_json(indent=2))
    elif fmt == "mermaid":
        click.echo(plan_mermaid(wiring))
    else:
        for table in plan_table(wiring):
            out.print(table)


@cli.command()
@handle_errors
def plugins() -> None:
    """List discovered generators with their declared resources."""
    from genwire.cli.render import plugins_table
    from genwire.generators.discovery import discover

    found = discover()
    out.print(plugins_table(found.generators, found.origins))
    if found.problems:
        raise PluginError(found.problems)


@cli.command()
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
            report = _or_report(
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
            container = _wire_or_report(file, as_json, empty)
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
                    **_failure_text("interrupted"),
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


@cli.command()
@_FILE
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
@click.option("--address", help="Ray cluster address (with --engine ray).")
@click.option(
    "--workers", type=click.IntRange(min=1), help="Ray workers (with --engine ray; default: one per cluster CPU)."
)
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
    container = _boot_or_report(file, as_json, {})
    console = err if as_json else out  # --json: stdout holds the summary only
    target = output_path(container, output)

    def say_report() -> None:  # every ending of a run says where its report page is
        note = report_note(target, began)
        if note is not None:
            err.print(note, markup=False)

    if batch:
        from genwire.cli.batch_commands import local_provider_notes

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
            emit_json({**_failure_text("interrupted"), "rows_kept": kept, "checkpoint": str(directory)})
        from genwire.cli.batch_commands import interrupted_hint
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
            summary = _failure(exc)
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
    from genwire.cli.estimate_command import cost_table
    from genwire.cli.render import run_summary

    console.print(run_summary(result))
    cached = sum(u.cached for u in result.usage.values())
    console.print(cost_table(result.cost, resumed=result.rows_resumed > 0, cached=cached))


_CACHE_FILE = click.argument(
    "file", type=click.Path(dir_okay=False, path_type=Path), default=Path("genwire.yaml"), required=False
)


def _response_cache(file: Path) -> Any:
    """The response cache of ``file``'s config (SPEC §12), whether or not it is enabled."""
    from genwire.config.loader import load_config
    from genwire.providers.response_cache import ResponseCache, cache_dir

    directory = cache_dir(load_config(file))
    assert directory is not None  # a config file always has a directory to sit beside
    return ResponseCache(directory)


@cli.group()
def cache() -> None:
    """The response cache: answers a rerun takes instead of asking the model again."""


@cache.command("info")
@_CACHE_FILE
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object.")
@handle_errors
def cache_info(file: Path, as_json: bool) -> None:
    """Entries, size, hits and age of FILE's response cache (default ./genwire.yaml)."""
    from genwire.cli.render import cache_table

    store = _response_cache(file)
    try:
        info = store.info()
    finally:
        store.close()
    if as_json:
        write_json(info.as_dict())
    else:
        out.print(cache_table(info))


@cache.command("clear")
@_CACHE_FILE
@handle_errors
def cache_clear(file: Path) -> None:
    """Delete every entry of FILE's response cache (default ./genwire.yaml)."""
    store = _response_cache(file)
    try:
        removed = store.clear()
    finally:
        store.close()
    out.print(f"removed {removed:,} cached answers from {store.directory}", markup=False)


@cli.command()
@click.argument("targets", nargs=-1, required=True, metavar="FILE_OR_MODULE...")
@click.option("--json", "as_json", is_flag=True, help="Print the generators checked and the findings as JSON.")
def lint(targets: tuple[str, ...], as_json: bool) -> None:
    """Check plugin code: every resource slot a generator uses must be declared (exit 1 if not)."""
    from genwire.cli.lint_command import lint_targets

    lint_targets(targets, as_json)


@cli.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path), default=".")
@click.option("--force", is_flag=True, help="Overwrite an existing genwire.yaml (and genwire.schema.json).")
@handle_errors
def init(directory: Path, force: bool) -> None:
    """Write a starter genwire.yaml and sample documents that run offline."""
    from genwire.cli.starter import write_starter

    for path in write_starter(directory, force=force):
        out.print(f"wrote {path}", markup=False)
    out.print(f"next: genwire run {directory / 'genwire.yaml'}", markup=False)


@cli.command()
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


@cli.command()
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
@click.option("--address", help="Ray cluster address (with --engine ray).")
@click.option(
    "--workers", type=click.IntRange(min=1), help="Ray workers (with --engine ray; default: one per cluster CPU)."
)
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
    from genwire.cli.estimate_command import run_estimate

    container = _boot_or_report(file, as_json, {})
    run_estimate(
        container,
        file,
        sample,
        num_records,
        output,
        as_json,
        batch,
        no_cache,
        out=out,
        err=err,
        failure=_failure,
        engine=engine,
        ray_address=address,
        ray_workers=workers,
    )


def _register_batches() -> None:
    from genwire.cli.batch_commands import batches  # click only at import: costs nothing
    from genwire.cli.report_command import report

    cli.add_command(batches)
    # Exits as every command does: a signal unwinds it (no half-written page is left), one line.
    assert report.callback is not None
    report.callback = handle_errors(report.callback)
    cli.add_command(report)
    from genwire.cli.serve_command import serve  # managed servers (SPEC §23)

    assert serve.callback is not None
    serve.callback = handle_errors(serve.callback)
    cli.add_command(serve)

    from genwire.cli.handoff_commands import card, export_command, push_command  # the hand-off (SPEC §24)

    for command in (card, export_command, push_command):
        assert command.callback is not None
        command.callback = handle_errors(command.callback)
        cli.add_command(command)


_register_batches()


def main() -> None:
    """``python -m genwire.cli.main`` and older console scripts: the same start-up as the
    console script's tiny entry module (which imports this one: it never imports entry)."""
    from genwire.cli.exits import start_process

    run_cli(cli, start_process(None))


if __name__ == "__main__":
    main()
