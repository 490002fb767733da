"""``genwire estimate FILE``: the pre-flight, the first K rows for real (kept in the
checkpoint and the response cache, so ``genwire run`` continues after them), and the
projection of the rest (SPEC §16). Also the run summary's cost table. Heavy imports stay
inside the functions: registering the command costs nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from genwire.cli.consoles import err, out
from genwire.cli.loading import failure
from genwire.providers.money import price_hint, usd

if TYPE_CHECKING:
    from rich.table import Table

    from genwire.engine.money.estimate import Estimate

__all__ = ["cost_table", "estimate_table", "run_estimate"]


def _tokens(value: float) -> str:
    return f"{value:,.0f}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def cost_table(cost: dict[str, Any] | None, *, resumed: bool = False, cached: int = 0) -> Table:
    """The run's cost (its ``"cost"`` object) per model and in total. Its tokens are the
    ledger's, every session's: a ``resumed`` run's title says so, beside the summary's
    figures of this session alone. ``cached``: answers this session took from the response
    cache (none: no "saved by the cache" row, there is nothing to say)."""
    from rich.markup import escape
    from rich.table import Table

    title = "Cost of the whole run (every session; this session's share below)" if resumed else "Cost"
    unpriced = [alias for alias, m in (cost or {}).get("by_model", {}).items() if m["usd"] is None]
    hint = escape(price_hint(unpriced)) if unpriced else None
    table = Table(title=title, title_justify="left", caption=hint, caption_justify="left")
    for name in ("model", "input tokens", "output tokens", "USD", "price from"):
        table.add_column(name, justify="left" if name in ("model", "price from") else "right")
    if not cost:
        return table
    for alias, m in cost["by_model"].items():
        tokens = (_tokens(m["input_tokens"]), _tokens(m["output_tokens"]))
        table.add_row(escape(alias), *tokens, usd(m["usd"]), escape(m["price_source"]))
    table.add_row("total (whole run)", "", "", usd(cost["total_usd"]), "")
    table.add_row("this session", "", "", usd(cost["this_session_usd"]), "")
    if cached:
        table.add_row("saved by the cache", "", "", usd(cost["saved_by_cache_usd"]), "")
    return table


def estimate_table(found: Estimate, unit: str = "rows") -> Table:
    """``unit``: what the projection counts (a gated pipeline's: candidates, SPEC §21)."""
    from rich.markup import escape
    from rich.table import Table

    done = f"{found.rows_done:,} of {found.rows_total:,} {unit} done"
    table = Table(
        title=f"Estimate: {found.sample_rows:,} {unit} sampled ({usd(found.sample_cost_usd)}); {done}, "
        f"{found.rows_left:,} to go" + (" (batch prices)" if found.batch else ""),
        title_justify="left",
    )
    per = "req/row" if unit == "rows" else "req/candidate"
    heads = (
        "model", per, "input tok/req\nmean · p95", "output tok/req\nmean · p95", "latency", "requests",
    )  # fmt: skip
    for name in (*heads, "cost", "worst case", "price from"):
        table.add_column(name, justify="left" if name in ("model", "price from") else "right")
    for m in found.models:
        cached = f" (+{m.sample_cached / max(1, found.sample_rows):.1f} cached)" if m.sample_cached else ""
        table.add_row(
            escape(m.alias),
            f"{m.requests_per_row:.2f}{cached}",
            f"{m.input_tokens_mean:,.0f} · {m.input_tokens_p95:,.0f}",
            f"{m.output_tokens_mean:,.0f} · {m.output_tokens_p95:,.0f}",
            f"{m.latency_s_mean * 1000:,.0f} ms" + (f", {m.rate_limited} × 429" if m.rate_limited else ""),
            f"{m.requests:,}",
            usd(m.cost_usd),
            usd(m.worst_cost_usd),
            escape(m.price_source),
        )
    table.add_row(
        "total", "", _tokens(found.input_tokens), _tokens(found.output_tokens), "", f"{found.requests:,}",
        usd(found.cost_usd), usd(found.worst_cost_usd), "",
    )  # fmt: skip
    start = found.workers_start_s
    started = f"; includes the Ray workers' start-up, {_duration(start)} in the sample" if start is not None else ""
    table.caption = escape(f"duration ≈ {_duration(found.duration_s)}, bound by {found.binding_limit}{started}")
    table.caption_justify = "left"
    return table


def run_estimate(
    container: Any,
    file: Path,
    sample: int,
    num_records: int | None,
    output: Path | None,
    as_json: bool,
    batch: bool,
    no_cache: bool,
    *,
    engine: Literal["local", "ray"] = "local",
    ray_address: str | None = None,
    ray_workers: int | None = None,
) -> None:
    """``genwire estimate`` once its container is booted (``cli.commands.run_command`` owns the
    command: this module never imports it back)."""
    from genwire.cli.exits import emit_json
    from genwire.cli.render import RichProgress, interrupted_message, show_preflight
    from genwire.cli.signals import Interrupted, run_interruptibly
    from genwire.engine.money.estimate import estimate_of
    from genwire.engine.records.checkpoint import checkpoint_dir, kept_rows
    from genwire.engine.run.conductor import output_path
    from genwire.engine.run.options import RunOptions
    from genwire.errors import GenwireError
    from genwire.preflight.report import PreflightError

    console = err if as_json else out
    n = num_records or container.config.pipeline.num_records
    gated = any(c.generator_cls.metadata.gate for c in container.columns)  # K candidates, N kept rows (SPEC §21)
    options = RunOptions(
        num_records=n, output=output, sample_rows=sample if gated else min(sample, n), batch=batch,
        probe_cache=not no_cache, engine=engine, ray_address=ray_address, ray_workers=ray_workers,
    )  # fmt: skip

    async def go() -> Any:
        async with container:
            return await container.run(
                options, progress=RichProgress(console), on_preflight=lambda r: show_preflight(console, r)
            )

    try:
        result = run_interruptibly(go())
    except Interrupted as exc:  # as at `run`: what is kept, and how to go on (exit 130 / 143)
        directory = checkpoint_dir(output_path(container, output))
        kept = kept_rows(directory)
        if as_json:
            emit_json(
                {"ok": False, "error": "interrupted", "errors": ["interrupted"], "rows_kept": kept,
                 "checkpoint": str(directory)}
            )  # fmt: skip
        err.print(interrupted_message(directory, kept, n), markup=False)
        sys.exit(exc.exit_code)
    except GenwireError as exc:
        if as_json:
            summary = failure(exc)
            if isinstance(exc, PreflightError):
                summary["preflight"] = exc.report.model_dump(mode="json")
            emit_json(summary)
        raise
    found = estimate_of(container, result, batch=batch)
    gates = None
    if result.funnel is not None:
        from genwire.cli.gates_table import gates_table, weak_warning
        from genwire.engine.gates.estimate import gated_estimate

        gates = gated_estimate(result, found, [c.name for c in container.columns])
        if gates.weak:
            err.print(weak_warning(gates), markup=False)
    if as_json:
        extra = {}
        if gates is not None:
            extra = {
                "acceptance": {**vars(gates.acceptance)},
                "candidates_needed": gates.candidates_needed,
                "gates": gates.as_dict(),
            }
        emit_json({**found.as_dict(), "cost": result.cost, **extra})
        return
    out.print(estimate_table(found, unit="rows" if gates is None else "candidates"))
    for line in found.narrowed:
        out.print(line, markup=False)
    if gates is not None:
        table, projection = gates_table(gates, usd=usd, duration=_duration)
        out.print(table)
        out.print(projection, markup=False)
    run = f"genwire run {file}" + (f" -n {n}" if num_records else "") + (f" -o {output}" if output else "")
    what = "rows" if gates is None else "candidates"
    out.print(f"the {found.rows_done:,} {what} done are kept: `{run}` continues after them", markup=False)
    sys.stdout.flush()
