"""The run: its one gate (the pre-flight), then the local engine (or Ray), every batch
checkpointed, and the output written atomically once all rows were tried.

Resume is the default: a run over an existing checkpoint of the same configuration
generates only the rows it does not hold (see ``engine.records.checkpoint``). The parts a
session drives are in ``engine.run.session``; its figures in ``engine.money.accounts``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from genwire.config.limits import too_many_rows
from genwire.container.core import WiredPipeline
from genwire.engine.gates.plan import gated_run
from genwire.engine.money.accounts import RunAccounts
from genwire.engine.records.batch_journal import open_batch_ids
from genwire.engine.records.checkpoint import Checkpoint, checkpoint_dir
from genwire.engine.records.fingerprint import fingerprint
from genwire.engine.records.result import RunResult
from genwire.engine.records.writers import check_output, errors_path
from genwire.engine.rows.collector import collector_for_rows
from genwire.engine.run.batch_mode import batch_providers
from genwire.engine.run.options import Engine, RunOptions
from genwire.engine.run.session import RunPlan, RunSession
from genwire.engine.run.sink import Progress
from genwire.errors import RunError
from genwire.preflight.report import PreflightReport

__all__ = ["Engine", "RunOptions", "RunResult", "run_pipeline"]

FRESH_HINT = "run with --fresh (resume=False in Python)"

log = logging.getLogger("genwire.batch")


async def run_pipeline(
    container: WiredPipeline,
    options: RunOptions,
    *,
    progress: Progress | None = None,
    on_preflight: Callable[[PreflightReport], None] | None = None,
) -> RunResult:
    """A run, stage by stage: what it makes and where (refused before anything is
    opened), its accounting (a cap it cannot keep is refused), the checkpoint, then the
    session: the pre-flight, the rows, the output. However it ends, the report says how."""
    plan = plan_run(container, options)
    finished = finished_output(container, options, plan)
    if finished is not None:
        return finished
    accounts = RunAccounts(container, max_cost_usd=options.max_cost_usd, engine=plan.engine)
    checkpoint = open_checkpoint(container, options, plan, accounts)
    session = RunSession(container, options, plan, checkpoint, accounts, progress)
    try:
        accounts.attach()  # the probes are paid for too
        await session.preflight(on_preflight)
        accounts.begin_rows()  # the estimate measures rows, not probes
        with collector_for_rows():
            await session.generate()
        return session.complete()
    except BaseException as error:
        await session.abandon(error)
        raise
    finally:
        await session.close()


def plan_run(container: WiredPipeline, options: RunOptions) -> RunPlan:
    """The run's rows, engine and output, checked: before anything is paid for, the output
    must be writable and must not be an input."""
    engine, ray_workers = options.engine, options.ray_workers
    n = container.config.pipeline.num_records if options.num_records is None else options.num_records
    if n <= 0:
        raise RunError(f"num_records must be positive, got {n}")
    if too_many_rows(n):
        raise RunError(f"num_records {n:,}: {too_many_rows(n)}")
    if engine not in ("local", "ray"):
        raise RunError(f"unknown engine {engine!r}; use 'local' or 'ray'")
    if ray_workers is not None and ray_workers < 1:
        raise RunError(f"ray_workers must be a positive number of workers, got {ray_workers}")
    batching = batch_providers(container, options.batch)
    if batching and engine != "local":
        raise RunError("batch mode runs on the local engine; drop --engine ray (or --batch)")
    target = output_path(container, options.output)
    directory = checkpoint_dir(target)
    check_output(target, protected=dataset_files(container), extra=[errors_path(target), directory])
    gated = gated_run(container, n, batch=bool(batching))  # SPEC §21; None without a gate
    return RunPlan(n, engine, batching, target, directory, gated)


def finished_output(container: WiredPipeline, options: RunOptions, plan: RunPlan) -> RunResult | None:
    """A rerun over the output a finished run of the same configuration wrote, untouched
    since (its report page says so: ``report.finished``): that output, nothing opened,
    sent or written. None to run: ``--fresh``, an estimate, a checkpoint in the way."""
    from genwire.engine.report import report_path
    from genwire.engine.report.finished import finished_run

    if not options.resume or options.sample_rows is not None or plan.directory.exists():
        return None
    began = time.perf_counter()
    found = finished_run(
        plan.target,
        report_path(plan.target),
        lambda: fingerprint(container.loaded, container.columns),
        plan.num_records,
    )
    if found is None:
        return None
    return RunResult(
        output=plan.target,
        rows_requested=plan.num_records,
        rows_written=found.rows,
        rows_failed=0,
        errors_file=None,
        duration_s=time.perf_counter() - began,
        rows_resumed=found.rows,
        already_complete=True,
    )


def open_checkpoint(container: WiredPipeline, options: RunOptions, plan: RunPlan, accounts: RunAccounts) -> Checkpoint:
    """The run's checkpoint (a resume when it holds rows), and the ledger in it."""
    checkpoint = Checkpoint.open(
        plan.directory,
        fingerprint(container.loaded, container.columns),
        plan.num_records,
        fresh=not options.resume,
        fresh_hint=FRESH_HINT,
        candidates=plan.gated.cap if plan.gated is not None else None,
    )
    try:
        accounts.open(plan.directory, probing=not options.skip_preflight)
    except BaseException:
        checkpoint.close()
        raise
    if not options.resume:
        warn_of_open_batches(plan.directory, collected=bool(plan.batching))
    return checkpoint


def output_path(container: WiredPipeline, output: str | Path | None) -> Path:
    return Path(output) if output is not None else container.loaded.resolve_path(container.config.pipeline.output)


def dataset_files(container: WiredPipeline) -> list[Path]:
    return [container.loaded.resolve_path(d.path) for d in container.config.datasets.values()]


def warn_of_open_batches(directory: Path, *, collected: bool) -> None:
    """A fresh start keeps batch mode's journal (``Checkpoint``): say what it still lists."""
    still_open = open_batch_ids(directory)
    if not still_open:
        return
    then = (
        "this run collects the requests it asks again from them instead of paying twice"
        if collected
        else "a --batch run would collect its requests from them instead of paying twice"
    )
    log.warning(
        "--fresh keeps the %d batch(es) an earlier run left open at the provider (%s): %s; "
        "`genwire batches cancel` on this config cancels them",
        len(still_open),
        ", ".join(still_open[:3]) + (", ..." if len(still_open) > 3 else ""),
        then,
    )
