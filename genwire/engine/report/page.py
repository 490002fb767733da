"""The report page: one HTML file, styles inline, plots as inline SVG, no script, nothing
fetched (a Content-Security-Policy says so to the browser too). Every text that comes
from a row, a model, a config or an error goes through ``t`` (``html.escape``) here, the
one place text becomes HTML. Numbers the tests read back carry ``data-metric``.

One role, kept whole (~430 lines): the page's sections, one function each in page order,
all through the same ``t``; its look is ``report.style``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from html import escape
from pathlib import Path
from typing import Any

from genwire.engine.report.data import cell_text
from genwire.engine.report.figures import ModelTotals, ReportData, merged_latency, percentile
from genwire.engine.report.finished import finished_mark
from genwire.engine.report.style import CSS, OUTCOME_STYLE
from genwire.engine.report.svg import colour, latency_histogram, time_chart
from genwire.engine.report.wiring_svg import wiring_section
from genwire.errors import plural
from genwire.providers.money import price_hint
from genwire.providers.money import usd as usd_text

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def t(value: Any) -> str:
    """Any value as HTML text: escaped, quotes included."""
    return escape(str(value), quote=True)


def n(value: float) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    return f"{int(value):,}"


def seconds_text(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 1:
        return f"{value * 1000:.0f} ms" if value >= 0.01 else f"{value * 1000:.1f} ms"
    return f"{value:.2f} s"


def metric(name: str, value: float, shown: str | None = None) -> str:
    return f'<span data-metric="{t(name)}" data-value="{t(value)}">{t(shown if shown is not None else n(value))}</span>'


def render(data: ReportData, *, version: str = "") -> str:
    body = [
        _header(data),
        _summary(data),
        _funnel(data),
        wiring_section(data.about.wiring),
        _over_time(data),
        _models(data),
        _latency(data),
        _preflight(data),
        _failures(data),
        _samples(data),
        _notes(data),
        f"<footer>genwire {t(version)} · written {t(time.strftime('%Y-%m-%d %H:%M:%S %Z'))}"
        " · one self-contained file: no script, nothing fetched</footer>",
    ]
    return (
        "<!DOCTYPE html>\n" + _mark(data) + '<html lang="en"><head><meta charset="utf-8">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        'img-src data:">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>genwire report · {t(data.output)}</title><style>{CSS}</style></head>"
        f"<body><main>{''.join(body)}</main></body></html>\n"
    )


def _mark(data: ReportData) -> str:
    """A run that finished with every row written marks it: a rerun leaves it alone."""
    if data.outcome != "completed" or data.rows_failed:
        return ""
    return finished_mark(Path(data.output), data.fingerprint, data.rows_requested, data.rows_written)


def _header(data: ReportData) -> str:
    style = OUTCOME_STYLE.get(data.outcome, "warn")
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data.started)) if data.started else "–"
    sessions = f"{data.sessions} session{'s' if data.sessions != 1 else ''}"
    out = [
        "<header><h1>genwire run report</h1>",
        f'<span class="badge {style}" data-metric="outcome">{t(data.outcome)}</span></header>',
        f'<p class="sub">{t(data.output)} · started {t(started)} · {t(sessions)} · {t(_clock(data))}</p>',
    ]
    if data.message and data.outcome != "completed":
        out.append(f'<div class="message">{t(data.message)}</div>')
    return "".join(out)


def _clock(data: ReportData) -> str:
    """The sessions' time, split as the terminal's bar and summary split it: the pre-flight,
    then generating (none when no pre-flight passed: nothing was generated)."""
    total = seconds_text(data.active_s)
    if not data.generating_s:
        return f"{total}: pre-flight {seconds_text(data.preflight_s)}, nothing generated" if data.preflight_s else total
    if not data.preflight_s:
        return f"{total} generating"
    return f"{total}: pre-flight {seconds_text(data.preflight_s)}, generating {seconds_text(data.generating_s)}"


def _card(key: str, name: str, value: float, shown: str | None = None) -> str:
    return f'<div class="card"><div class="v">{metric(name, value, shown)}</div><div class="k">{t(key)}</div></div>'


def _summary(data: ReportData) -> str:
    models = data.models.values()
    requests = sum(m.count("requests") for m in models)
    tokens_in = sum(m.count("prompt_tokens") for m in models)
    tokens_out = sum(m.count("completion_tokens") for m in models)
    cost = data.cost()
    made = data.rows_written - data.rows_resumed
    rate = made / data.generating_s if data.generating_s > 0 else 0.0  # the bar's rate: the pre-flight left out
    cards = [
        _card("rows written", "rows_written", data.rows_written),
        _card("rows failed", "rows_failed", data.rows_failed),
        _card("rows resumed", "rows_resumed", data.rows_resumed),
        _card("answers from cache", "cached", data.cached),
        _card("model requests", "requests", requests),
        _card("input tokens", "prompt_tokens", tokens_in),
        _card("output tokens", "completion_tokens", tokens_out),
        _card("cost", "cost_usd", sum(cost.values()), usd_text(sum(cost.values())))
        if cost is not None
        else '<div class="card"><div class="v"><span data-metric="cost_usd">unknown</span></div>'
        f'<div class="k">cost ({t(_unpriced(data))})</div></div>',
        _card("rows / s generating", "rows_per_s", round(rate, 2), f"{rate:,.1f}"),
    ]
    if data.rows_requested is not None:
        cards.insert(0, _card("rows asked for", "rows_requested", data.rows_requested))
    return '<h2>Summary</h2><div class="cards">' + "".join(cards) + "</div>"


def _unpriced(data: ReportData) -> str:
    """Why the cost is unknown, and how to know it (SPEC §16)."""
    missing = [alias for alias, m in data.models.items() if "usd" not in m.counters]
    return price_hint(missing) if missing else "no prices set"


def _legend(names: Iterable[str]) -> str:
    items = "".join(f'<span><i style="background:{colour(i)}"></i>{t(name)}</span>' for i, name in enumerate(names))
    return f'<div class="legend">{items}</div>'


def _over_time(data: ReportData) -> str:
    bins = data.bins()
    if not bins:
        return '<h2>Over time</h2><p class="muted">No metrics were recorded.</p>'
    aliases = list(data.models)
    x0 = [b.x for b in bins]
    width = bins[0].width
    end = max(data.active_s, bins[-1].x + width)
    charts = [
        (
            "Rows done",
            [("written", _running(b.rows for b in bins)), ("failed", _running(b.failed for b in bins))],
            False,
        ),
        ("Requests per second", [(a, [b.requests.get(a, 0) / b.width for b in bins]) for a in aliases], False),
        (
            "Requests in flight (most at once)",
            [(a, [float(b.in_flight.get(a, 0)) for b in bins]) for a in aliases],
            False,
        ),
        ("429 answers (rate limited)", [(a, [b.limited.get(a, 0) for b in bins]) for a in aliases], True),
    ]
    panels = []
    for title, series, bars in charts:
        svg = time_chart(title, x0, width, end, series, bars=bars, boundaries=data.boundaries)
        total = f' <span class="muted">· {n(sum(sum(v) for _, v in series))} in all</span>' if bars else ""
        panels.append(f'<div class="panel"><h3>{t(title)}{total}</h3>{svg}{_legend(name for name, _ in series)}</div>')
    note = (
        f'<p class="muted">Dashed lines: where a resumed session began. Bins of {t(f"{width:g}")} s.</p>'
        if data.boundaries
        else f'<p class="muted">Bins of {t(f"{width:g}")} s.</p>'
    )
    return '<h2>Over time</h2><div class="grid2">' + "".join(panels) + "</div>" + note


def _running(values: Iterable[float]) -> list[float]:
    """Running totals: progress reads better than per-bin rows, which come in batches."""
    total, out = 0.0, []
    for value in values:
        total += value
        out.append(total)
    return out


def _classes(counts: dict[str, int]) -> str:
    if not counts:
        return '<span class="muted">–</span>'
    return ", ".join(f"{t(c)} {n(k)}" for c, k in sorted(counts.items()))


def _models(data: ReportData) -> str:
    if not data.models:
        return ""
    head = (
        "<tr><th>model</th><th class=n>requests</th><th class=n>cache hits</th><th class=n>batched</th>"
        "<th class=n>input tokens</th><th class=n>output tokens</th><th class=n>cost</th>"
        "<th class=n>retries</th><th class=n>429s</th><th>requests failed</th>"
        "<th class=n>p50</th><th class=n>p99</th><th class=n>peak in flight</th></tr>"
    )
    rows = []
    for alias, m in data.models.items():
        a = t(alias)

        def cell(field: str, value: float, alias: str = a, extra: str = "") -> str:
            return f'<td class=n><span data-model="{alias}" data-field="{field}">{n(value)}</span>{extra}</td>'

        usd = m.counters.get("usd")
        retried = m.retries_by_class
        rows.append(
            f'<tr><td class="mono">{a}<div class="muted small">{t(data.served.get(alias, ""))}</div></td>'
            + cell("requests", m.count("requests"))
            + cell("cached", m.count("cached"))
            + cell("batched", m.count("batched"))
            + cell("prompt_tokens", m.count("prompt_tokens"))
            + cell("completion_tokens", m.count("completion_tokens"))
            + (f'<td class=n><span data-model="{a}" data-field="usd">{usd_text(usd)}</span></td>')
            + cell(
                "retries",
                m.count("retries"),
                extra=f'<div class="muted small">{_classes(retried)}</div>' if retried else "",
            )
            + cell("rate_limited", m.count("rate_limited"))
            + f"<td>{_classes(m.gave_up)}</td>"
            + f"<td class=n>{t(seconds_text(percentile(m.latency, 0.5)))}</td>"
            + f"<td class=n>{t(seconds_text(percentile(m.latency, 0.99)))}</td>"
            + cell("peak_in_flight", m.peak_in_flight)
            + "</tr>"
        )
        rows.extend(_endpoint_rows(data, alias))
    return f'<h2>Models</h2><div class="wrap"><table>{head}{"".join(rows)}</table></div>'


def _endpoint_rows(data: ReportData, alias: str) -> list[str]:
    """A pool's endpoints under its alias (SPEC §17): requests, failures, latency, as the
    run's summary gives them (a finished run; an unfinished one has them per alias only)."""
    model = ((data.summary or {}).get("models") or {}).get(alias)
    endpoints = model.get("endpoints") if isinstance(model, dict) else None
    if not isinstance(endpoints, dict):
        return []
    rows = []
    for name, stats in endpoints.items():
        if not isinstance(stats, dict):
            continue
        key = t(f"{alias}/{name}")

        def cell(field: str, key: str = key, stats: dict[str, Any] = stats) -> str:
            value = stats.get(field)
            shown = n(value) if isinstance(value, int | float) else "–"
            return f'<span data-endpoint="{key}" data-field="{field}">{shown}</span>'

        def latency(field: str, stats: dict[str, Any] = stats) -> str:
            value = stats.get(field)
            return t(seconds_text(value if isinstance(value, int | float) else None))

        rows.append(
            f'<tr class="endpoint"><td class="mono muted">via {t(name)}</td>'
            f"<td class=n>{cell('requests')}</td><td colspan=7></td>"
            f"<td>{cell('failures')} failed</td>"
            f"<td class=n>{latency('latency_p50_s')}</td><td class=n>p95 {latency('latency_p95_s')}</td><td></td></tr>"
        )
    return rows


def _latency(data: ReportData) -> str:
    overall = merged_latency(data.models)
    if not overall:
        return ""
    rows = []
    entries: list[tuple[str, ModelTotals | None, dict[int, int]]] = [("all models", None, overall)]
    if len(data.models) > 1:
        entries += [(alias, m, m.latency) for alias, m in data.models.items() if m.latency]
    for name, _, buckets in entries:
        cells = "".join(f"<td class=n>{t(seconds_text(percentile(buckets, q)))}</td>" for _, q in QUANTILES)
        rows.append(f'<tr><td class="mono">{t(name)}</td><td class=n>{n(sum(buckets.values()))}</td>{cells}</tr>')
    head = "<tr><th>model</th><th class=n>answers</th>" + "".join(f"<th class=n>{q}</th>" for q, _ in QUANTILES)
    marks = [(name, value) for name, q in QUANTILES if (value := percentile(overall, q)) is not None]
    return (
        '<h2>Latency</h2><div class="grid2"><div class="panel">'
        "<h3>Time per request (an HTTP attempt, or a call of an embedded model), all models</h3>"
        f"{latency_histogram(overall, marks)}</div>"
        f'<div><div class="wrap"><table>{head}</tr>{"".join(rows)}</table></div>'
        '<p class="muted">From sending a request to its answer (waits for a slot and retry backoffs not '
        "included); percentiles read from log-scale buckets, within about 12 %.</p></div></div>"
    )


def _preflight(data: ReportData) -> str:
    report = data.preflight
    if not isinstance(report, dict):
        return '<h2>Pre-flight</h2><p class="muted">No pre-flight in this run (skipped).</p>'
    rows = []
    for check in report.get("checks") or []:
        if not isinstance(check, dict):
            continue
        status = str(check.get("status", ""))
        style = {"ok": "ok", "failed": "bad"}.get(status, "warn")
        latency = check.get("latency_s")
        # A pool's endpoint (SPEC §17) and a request shape's column (SPEC §11) say which check it is.
        target = str(check.get("target", ""))
        target += f" via {check['endpoint']}" if check.get("endpoint") else ""
        target += f" ({check['variant']})" if check.get("variant") else ""
        rows.append(
            f'<tr><td class="mono">{t(target)}</td><td>{t(check.get("kind", ""))}</td>'
            f'<td><span class="badge {style}">{t(status)}</span></td><td>{t(check.get("error_class") or "")}</td>'
            f"<td class=n>{t(seconds_text(latency if isinstance(latency, int | float) else None))}</td>"
            f"<td class=n>{t(check.get('attempts', ''))}</td>"
            f"<td>{t(', '.join(map(str, check.get('used_by') or [])))}</td>"
            f'<td class="cell">{t(check.get("message", ""))}{_server_note(data, check)}</td></tr>'
        )
    head = (
        "<tr><th>target</th><th>kind</th><th>status</th><th>class</th><th class=n>latency</th>"
        "<th class=n>attempts</th><th>used by</th><th>message</th></tr>"
    )
    took = report.get("duration_s")
    when = f" in {seconds_text(took)}" if isinstance(took, int | float) else ""
    return (
        f'<h2>Pre-flight</h2><p class="muted">{t(plural(len(rows), "check"))}{t(when)}.</p>'
        f'<div class="wrap"><table>{head}{"".join(rows)}</table></div>'
    )


def _server_note(data: ReportData, check: dict[str, Any]) -> str:
    """A managed server's check (SPEC §23): a link to its log (beside the page), and how
    often it restarted during the run."""
    if check.get("kind") != "server":
        return ""
    label = str(check.get("endpoint") or check.get("target", ""))
    log = f"{Path(data.output).name}.servers/{label}.log" if data.output else None
    link = f' <a href="{t(log)}">log</a>' if log else ""
    servers = (data.summary or {}).get("servers")
    found = servers.get(str(check.get("target", ""))) if isinstance(servers, dict) else None
    restarts = found.get("restarts") if isinstance(found, dict) else None
    restarted = f" Restarted {t(plural(restarts, 'time'))} during the run." if isinstance(restarts, int) else ""
    return link + restarted


def _failures(data: ReportData) -> str:
    if not data.failures:
        return '<h2>Failed rows</h2><p class="muted">No row failed.</p>'
    parts = ["<h2>Failed rows</h2>"]
    for error_class, group in data.failures.items():
        rows = "".join(
            f'<tr><td class=n>{t(e["row"])}</td><td class="mono">{t(e["column"])}</td>'
            f'<td class="cell"><div class="clip">{t(e["error"])}</div></td>'
            f'<td class="cell mono"><div class="clip">{t(_row_text(e["data"]))}</div></td></tr>'
            for e in group.examples
        )
        shown = f"{len(group.examples)} example(s)" if group.count > len(group.examples) else ""
        parts.append(
            f'<details open><summary><span class="mono">{t(error_class)}</span> · '
            f'<span data-failure-class="{t(error_class)}">{n(group.count)}</span> row(s) '
            f'<span class="muted">{t(shown)}</span></summary><div class="wrap"><table>'
            "<tr><th class=n>row</th><th>column</th><th>error</th><th>row so far</th></tr>"
            f"{rows}</table></div></details>"
        )
    return "".join(parts)


def _funnel(data: ReportData) -> str:
    """A gated run (SPEC §21): candidates → each gate → kept, and the rejects by gate."""
    funnel = data.funnel
    if funnel is None:
        return ""
    steps = [f'<span data-funnel="candidates">{n(funnel.candidates)}</span> candidates']
    steps += [f'{t(gate)} <span data-funnel="{t(gate)}">{n(passed)}</span>' for gate, passed in funnel.steps]
    kept = f'<span data-funnel="kept">{n(funnel.kept)}</span> kept'
    if funnel.surplus:
        kept += f" (+{n(funnel.surplus)} surplus)"
    cost = funnel.rejected_usd
    paid = "unknown (a model has no price)" if cost is None else usd_text(cost)
    parts = [
        "<h2>Candidates and gates</h2>",
        f"<p>{' → '.join([*steps, kept])}</p>",
        f'<p class="muted">The rejected candidates cost <span data-metric="rejected_usd">{t(paid)}</span>; '
        "they are in the rejected file with their gate and reason.</p>",
    ]
    for gate, group in funnel.rejects.items():
        rows = "".join(
            f'<tr><td class=n>{t(e["candidate"])}</td><td class="cell"><div class="clip">{t(e["reason"])}</div></td>'
            f'<td class="cell mono"><div class="clip">{t(e["row"])}</div></td></tr>'
            for e in group.examples
        )
        parts.append(
            f'<details><summary><span class="mono">{t(gate)}</span> · '
            f'<span data-rejected="{t(gate)}">{n(group.count)}</span> rejected</summary><div class="wrap"><table>'
            "<tr><th class=n>candidate</th><th>reason</th><th>row so far</th></tr>"
            f"{rows}</table></div></details>"
        )
    return "".join(parts)


def _row_text(row: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in row.items())


def _samples(data: ReportData) -> str:
    if not data.samples:
        return '<h2>Sample rows</h2><p class="muted">No row kept yet.</p>'
    # Columns no kept row holds (a gate's verdict is never written) are left out.
    written = [c for c in data.columns if any(c in row for _, row in data.samples)]
    columns = written[:24] or list(data.samples[0][1])[:24]
    head = "<tr><th class=n>row</th>" + "".join(f"<th>{t(c)}</th>" for c in columns) + "</tr>"
    rows = []
    for index, row in data.samples:
        cells = "".join(
            f'<td class="cell"><div class="clip">{t(cell_text(row[c]) if c in row else "")}</div></td>' for c in columns
        )
        rows.append(f"<tr><td class=n>{t(index)}</td>{cells}</tr>")
    more = f" (first {len(columns)} of {len(written)} columns)" if len(written) > len(columns) else ""
    return (
        f'<h2>Sample rows</h2><p class="muted">The first {t(plural(len(data.samples), "row"))} kept{t(more)}; '
        "long cells are cut.</p>"
        f'<div class="wrap"><table>{head}{"".join(rows)}</table></div>'
    )


def _notes(data: ReportData) -> str:
    if not data.notes:
        return ""
    return "<h2>Notes</h2><ul>" + "".join(f"<li>{t(note)}</li>" for note in data.notes) + "</ul>"
