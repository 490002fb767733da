"""``genwire estimate FILE``: the pre-flight, the first K rows for real (kept in the
checkpoint and the response cache, so ``genwire run`` continues after them), and the
projection of the rest (SPEC §16). Also the run summary's cost table. Heavy imports stay
inside the functions: registering the command costs nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.table import Table

    from genwire.cli.consoles import LazyConsole
    from genwire.engine.estimate import Estimate
    from genwire.errors import GenwireError

__all__ = ["cost_table", "estimate_table", "run_estimate"]


def usd(value: float | None) -> str:
    """Dollars for a table (rounded for display only); ``unknown`` without a price."""
    if value is None:
        return "unknown"
    if value == 0:
        return "$0"
    return f"${value:,.4f}" if value >= 0.01 else f"${value:.6f}"


def _tokens(value: float) -> str:
    return f"{value:,.0f}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def cost_table(cost: dict[str, Any] | None, *, resumed: bool = False) -> Table:
    """The run's cost (its ``"cost"`` object) per model and in total. Its tokens are the
    ledger's, every session's: a ``resumed`` run's title says so, beside the summary's
    figures of this session alone."""
    from rich.markup import escape
    from rich.table import Table

    title = "Cost of the whole run (every session; this session's share below)" if resumed else "Cost"
    table = Table(title=title, title_justify="left")
    for name in ("model", "input tokens", "output tokens", "USD", "price from"):
        table.add_column(name, justify="left" if name in ("model", "price from") else "right")
    if not cost:
        return table
    for alias, m in cost["by_model"].items():
        tokens = (_tokens(m["input_tokens"]), _tokens(m["output_tokens"]))
        table.add_row(escape(alias), *tokens, usd(m["usd"]), escape(m["price_source"]))
    table.add_row("total (whole run)", "", "", usd(cost["total_usd"]), "")
    table.add_row("this session", "", "", usd(cost["this_session_usd"]), "")
    table.add_row("saved by the cache", "", "", usd(cost["saved_by_cache_usd"]), "")
    return table


def estimate_table(found: Estimate) -> Table:
    from rich.markup import escape
    from rich.table import Table

    done = f"{found.rows_done:,} of {found.rows_total:,} rows done"
    table = Table(
        title=f"Estimate: {found.sample_rows:,} rows sampled ({usd(found.sample_cost_usd)}); {done}, "
        f"{found.rows_left:,} to go" + (" (batch prices)" if found.batch else ""),
        title_justify="left",
    )
    heads = ("model", "req/row", "input tok/req\nmean · p95", "output tok/req\nmean · p95", "latency", "requests")
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
    table.caption = escape(f"duration ≈ {_duration(found.duration_s)}, bound by {found.binding_limit}")
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
    out: LazyConsole,
    err: LazyConsole,
    failure: Callable[[GenwireError], dict[str, Any]],
) -> None:
    """``genwire estimate`` once its container is booted (``cli.main`` owns the command:
    this module never imports it back)."""
    from genwire.cli.exits import emit_json
    from genwire.cli.render import RichProgress, interrupted_message, show_preflight
    from genwire.cli.signals import Interrupted, run_interruptibly
    from genwire.engine.checkpoint import checkpoint_dir, kept_rows
    from genwire.engine.estimate import estimate_of
    from genwire.engine.options import RunOptions
    from genwire.engine.run import output_path
    from genwire.errors import GenwireError
    from genwire.preflight.report import PreflightError

    console = err if as_json else out
    n = num_records or container.config.pipeline.num_records
    options = RunOptions(
        num_records=n, output=output, sample_rows=min(sample, n), batch=batch, probe_cache=not no_cache
    )

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
    if as_json:
        emit_json({**found.as_dict(), "cost": result.cost})
        return
    out.print(estimate_table(found))
    run = f"genwire run {file}" + (f" -n {n}" if num_records else "") + (f" -o {output}" if output else "")
    out.print(f"the {found.rows_done:,} rows done are kept: `{run}` continues after them", markup=False)
    sys.stdout.flush()
