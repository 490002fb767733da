"""Human output: tables for the plan, the plugins, the pre-flight and the run summary."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from genwire.errors import plural, printable

# Types only: `plan` must not load the engine, nor anything rich's live display.
if TYPE_CHECKING:
    from genwire.cli.consoles import LazyConsole
    from genwire.container.plan import WiringPlan
    from genwire.engine.run.conductor import RunResult
    from genwire.preflight.report import PreflightReport
    from genwire.providers.response_cache.layout import CacheInfo
    from genwire.providers.usage import Concurrency

_STATUS_STYLE = {"ok": "green", "failed": "bold red", "skipped": "yellow", "degraded": "bold yellow"}


def cell(value: str) -> str:
    """User- and server-supplied text as a literal cell: ``[local]`` or ``[/]`` in a model
    name, a path or an error message prints verbatim, never as rich markup, and a control
    or bidi character (a newline, U+202E) as an escape, never raw (``errors.printable``)."""
    return escape(printable(value))


def _cells(*values: str) -> list[str]:
    return [cell(v) for v in values]


def plan_table(plan: WiringPlan) -> list[Table]:
    columns = Table(title="Columns", title_justify="left")
    for head in ("column", "generator", "slot", "kind", "bound to", "reads"):
        columns.add_column(head)
    for col in plan.columns:
        reads = ", ".join(col.reads) or "–"
        if not col.slots:
            columns.add_row(*_cells(col.name, col.generator, "–", "–", "–", reads))
        for i, s in enumerate(col.slots):
            bound = ", ".join(s.resources) + (" (default)" if s.source == "defaults" else "")
            columns.add_row(
                *_cells(
                    col.name if i == 0 else "",
                    col.generator if i == 0 else "",
                    s.slot,
                    s.kind.value,
                    bound,
                    reads if i == 0 else "",
                )
            )
    targets = Table(title="Pre-flight targets (reachable from a wired generator)", title_justify="left")
    for head in ("target", "kind", "provider / model", "used by", "checked"):
        targets.add_column(head)
    for t in plan.targets:
        where = f"{t.provider} / {t.model}" if t.provider else "dataset"
        targets.add_row(
            *_cells(t.name, t.kind.value, where, ", ".join(t.used_by), "yes" if t.health_check else "skipped")
        )
    out = [columns, targets]
    if plan.servers:  # SPEC §23: server -> provider -> model -> columns
        servers = Table(title="Managed servers (started only when a wired model reaches them)", title_justify="left")
        for head in ("server", "kind / model", "providers", "models", "used by", "started"):
            servers.add_column(head)
        for sp in plan.servers:
            servers.add_row(
                *_cells(
                    sp.name,
                    f"{sp.kind} / {sp.model}",
                    ", ".join(sp.providers) or "–",
                    ", ".join(sp.models) or "–",
                    ", ".join(sp.used_by) or "–",
                    "yes" if sp.started else "no (no wired model reaches it)",
                )
            )
        out.append(servers)
    if plan.unreachable:
        unused = Table(title="Defined but reached by no column (not probed)", title_justify="left")
        unused.add_column("resource")
        for name in plan.unreachable:
            unused.add_row(cell(name))
        out.append(unused)
    return out


def plan_mermaid(plan: WiringPlan) -> str:
    """The plan as the one wiring graph's Mermaid, the dataset card's (SPEC §24)."""
    from genwire.engine.report.wiring import wiring_graph
    from genwire.engine.report.wiring_mermaid import mermaid

    return mermaid(wiring_graph(plan))


def show_preflight(console: Console | LazyConsole, report: PreflightReport) -> None:
    """The pre-flight table, then the warning of a pool that passed degraded (SPEC §17)."""
    console.print(preflight_table(report))
    warning = report.warning()
    if warning:
        console.print(warning, markup=False, style="yellow")


def preflight_table(report: PreflightReport) -> Table:
    verdict = "[green]passed[/]" if report.ok else f"[bold red]{len(report.failed)} failed[/]"
    if report.degraded:
        verdict += f", [bold yellow]{len(report.degraded)} pool endpoint(s) degraded[/]"
    table = Table(title=f"Pre-flight: {verdict} in {report.duration_s:.2f}s", title_justify="left")
    for head in ("target", "kind", "status", "class", "latency", "tries", "used by", "detail"):
        table.add_column(head, overflow="fold")
    for c in report.checks:
        style = _STATUS_STYLE[c.status]
        aliases = f" (= {', '.join(a for a in c.aliases if a != c.target)})" if len(c.aliases) > 1 else ""
        status = c.status if not c.cached else f"{c.status} (cached {c.age_s or 0:.0f}s ago)"
        target, kind, status, error_class, latency, tries, used_by, message = _cells(
            c.label + aliases,
            c.kind,
            status,
            c.error_class or "",
            f"{c.latency_s * 1000:.0f} ms",
            str(c.attempts),
            ", ".join(c.used_by),
            c.message,
        )
        table.add_row(target, kind, f"[{style}]{status}[/]", error_class, latency, tries, used_by, message)
    return table


def plugins_table(generators: dict[str, Any], origins: dict[str, str]) -> Table:
    table = Table(title="Generators", title_justify="left")
    for head in ("name", "required resources", "description", "from"):
        table.add_column(head, overflow="fold")
    for name in sorted(generators):
        meta = generators[name].metadata
        slots = ", ".join(f"{s}: {k.value}" for s, k in meta.required_resources.items()) or "{}"
        table.add_row(*_cells(name, slots, meta.description, origins[name]))
    return table


def run_summary(result: RunResult) -> Table:
    """Rows are the whole run's; time, requests and tokens this session's (a resumed
    run's table says which is which; the cost table below is the whole run's)."""
    resumed = result.rows_resumed > 0
    title = "Run summary (rows: the whole run; time, requests and tokens: this session)" if resumed else "Run summary"
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value")
    earlier = f" ({result.rows_resumed:,} resumed from the checkpoint)" if resumed else ""
    table.add_row("rows written", f"{result.rows_written:,} of {result.rows_requested:,}{earlier}")
    table.add_row(
        "rows failed", cell(str(result.rows_failed) + (f" → {result.errors_file}" if result.errors_file else ""))
    )
    session = " (this session)" if resumed else ""
    table.add_row(f"time{session}", _clock(result))
    if result.funnel is not None:  # a gated run (SPEC §21)
        funnel = result.funnel
        rate = f"; acceptance {funnel.rate:.1%}" if funnel.rate is not None else ""
        table.add_row("candidates", cell(funnel.text(result.surplus) + rate))
        rejected = ", ".join(f"{gate} {n:,}" for gate, n in funnel.rejected.items() if n)
        table.add_row("rejected", cell(f"{rejected or 'none'} → {result.rejected_file}"))
    for name, restarts in sorted(result.servers.items()):  # managed servers (SPEC §23)
        table.add_row(escape(f"server {name}"), "restarted " + plural(restarts, "time") if restarts else "no restart")
    for alias, endpoints in sorted(result.endpoints.items()):
        for name, stats in endpoints.items():
            d = stats.as_dict()
            latency = (
                f", latency mean {d['latency_mean_s']:.3f}s p95 {d['latency_p95_s']:.3f}s" if stats.latencies else ""
            )
            table.add_row(
                escape(f"model {alias} via {name}"),
                f"{plural(d['requests'], 'request')}, {plural(d['failures'], 'failure')}{latency}",
            )
    for alias, u in sorted(result.usage.items()):
        saved = plural(u.saved_tokens, "token")
        cached = f"; {plural(u.cached, 'answer')} from the cache ({saved} saved)" if u.cached else ""
        batched = f"{u.batched:,} in batches + " if u.batched else ""
        table.add_row(
            cell(f"model {alias}{session}"),
            f"{batched}{plural(u.requests, 'request')} ({plural(u.retries, 'retry', 'retries')}, "
            f"{u.rate_limited:,} rate-limited), "
            f"{u.prompt_tokens:,} prompt + {u.completion_tokens:,} completion tokens{cached}",
        )
    if result.batches:
        statuses: dict[str, int] = {}
        for b in result.batches:
            statuses[b.status] = statuses.get(b.status, 0) + 1
        table.add_row("batches", ", ".join(f"{n} {status}" for status, n in statuses.items()))
    for name, c in sorted(result.concurrency.items()):
        paused = f", paused {c.pauses:,} times by 429s" if c.pauses else ""
        table.add_row(cell(f"provider {name}"), _in_flight(c) + paused)
    output = (
        str(result.output) if result.finished else f"{result.output} (not written yet: the rows are in the checkpoint)"
    )
    table.add_row("output", cell(output))
    return table


def _clock(result: RunResult) -> str:
    """The session's time split as the bar sees it: the bar starts after the pre-flight, so
    its rate and this one are the same figure (rows per second of generating)."""
    rate = f"{result.generating_s:.2f}s generating ({result.rows_per_s:.1f} rows/s)"
    if result.preflight is None:
        return rate
    return f"{result.duration_s:.2f}s: pre-flight {result.preflight_s:.2f}s, then {rate}"


def _in_flight(c: Concurrency) -> str:
    """Requests in flight against ``max_concurrency``; the adaptive limit only when 429s
    moved it (it starts at ``max_concurrency``, halves at a 429, grows back while answers come)."""
    peak = f"peak {plural(c.peak_in_flight, 'request')} in flight (max_concurrency {c.max_concurrency})"
    if c.limit >= c.max_concurrency:
        return peak
    return f"{peak}; 429s lowered the limit, which ended at {c.limit}"


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "–"
    import datetime

    return datetime.datetime.fromtimestamp(stamp).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def cache_table(info: CacheInfo) -> Table:
    table = Table(title="Response cache", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value")
    table.add_row("directory", cell(str(info.directory)))
    table.add_row("entries", f"{info.entries:,}")
    table.add_row("size", f"{info.bytes:,} bytes")
    table.add_row("hits", f"{plural(info.hits, 'answer')} served")
    table.add_row("oldest", _when(info.oldest))
    table.add_row("newest", _when(info.newest))
    for column, count in info.columns.items():
        table.add_row(cell(f"column {column}"), plural(count, "entry", "entries"))
    return table


class RichProgress:
    """The run's progress bar: rows done, rows/s, ETA, failures."""

    def __init__(self, console: Console | LazyConsole) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("generating"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]:.1f} rows/s"),
            TextColumn("[red]{task.fields[failed]} failed"),
            TextColumn("{task.fields[status]}", markup=False),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console if isinstance(console, Console) else console.get(),
        )
        self._task: Any = None
        self._failed = 0
        self._made = 0  # rows tried in this run (the rate leaves resumed rows out)

    def start(self, total: int, done: int = 0) -> None:
        self._progress.start()
        self._task = self._progress.add_task("rows", total=total, completed=done, failed=0, rate=0.0, status="")

    def advance(self, done: int, failed: int, status: str = "") -> None:
        self._failed += failed
        self._made += done + failed
        task = self._progress.tasks[0]
        elapsed = task.elapsed or 0.0
        self._progress.update(
            self._task,
            completed=task.completed + done + failed,
            failed=self._failed,
            rate=self._made / elapsed if elapsed > 0 else 0.0,
            status=status,
        )

    def stop(self) -> None:
        self._progress.stop()


def paid_row_answers(directory: Path) -> int:
    """Answers paid for rows (not the pre-flight's probes) the run's ledger lists: what the
    response cache holds for a rerun even when no row was kept."""
    import json

    from genwire.engine.records.ledger import LEDGER_NAME

    count = 0
    try:
        with (directory / LEDGER_NAME).open("rb") as handle:
            for line in handle:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line torn by a kill
                if isinstance(record, dict) and record.get("rows"):
                    count += 1
    except OSError:
        return 0
    return count


def interrupted_message(directory: Path, kept: int, total: int, *, response_cache: bool = True) -> str:
    """What an interrupted ``run`` or ``estimate`` says: the rows kept and how to go on;
    before any row was kept, the answers already paid that the response cache keeps."""
    if kept:
        return f"interrupted: {kept:,} of {total:,} rows kept in {directory}; rerun the same command to resume"
    paid = paid_row_answers(directory)
    if not paid:
        return "interrupted before any row was done; nothing to resume"
    answers = plural(paid, "answer")
    if response_cache:
        return (
            f"interrupted before any row was kept; the response cache holds the {answers} paid for so far: "
            "rerun the same command and they are not paid again"
        )
    were = "was" if paid == 1 else "were"
    return f"interrupted before any row was kept; {answers} {were} paid for and not kept (--no-response-cache)"


def already_complete(result: RunResult) -> str:
    """A rerun over a finished run's untouched output: what is there, and how to redo it."""
    from genwire.engine.report import report_path

    return (
        f"already complete: {plural(result.rows_written, 'row')} in {result.output} "
        f"(report page: {report_path(result.output)}); nothing was sent or written. "
        "The configuration and the output are as that run left them: run with --fresh to make it again."
    )


def report_note(output: Path, since: float) -> str | None:
    """``report page: PATH`` when this session wrote the run's report page (every ending
    of a run does; an estimate does not), else None."""
    from genwire.engine.report import report_path

    page = report_path(output)
    try:
        written = page.stat().st_mtime
    except OSError:
        return None
    return f"report page: {page}" if written >= since - 1 else None
