"""Plots as inline SVG, drawn here: the report needs no script and fetches nothing.

Every text placed in a plot goes through ``html.escape`` (a model alias is user text).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from genwire.providers.metrics import BUCKETS, bucket_bounds

PALETTE = ["#2563eb", "#d9480f", "#0ca678", "#ae3ec9", "#f59f00", "#1098ad", "#e64980", "#495057"]
WIDTH, HEIGHT = 560, 210
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 12, 28


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def nice_step(span: float, ticks: int = 4) -> float:
    """A round step (1, 2 or 5 times a power of ten) giving about ``ticks`` ticks over ``span``."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 5.0, 10.0):
        if factor * power >= raw:
            return float(factor * power)
    return float(10 * power)


def number(value: float) -> str:
    """Short axis text: 0.5, 12, 1.2k, 3M."""
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:g}M"
    if magnitude >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}" if magnitude >= 1 or value == 0 else f"{value:.2g}"


def duration(seconds: float) -> str:
    """Axis text for seconds into the run: 45s, 2m30s, 1h05m."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes}m" + (f"{rest:02d}s" if rest else "")
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m"


def _time_step(span: float) -> float:
    for step in (1.0, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400):
        if span / step <= 6:
            return float(step)
    return nice_step(span, 6)


def time_chart(
    label: str,
    x0: Sequence[float],
    width_s: float,
    end_s: float,
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    bars: bool = False,
    boundaries: Sequence[float] = (),
) -> str:
    """Values over time: one line per series (or stacked bars), ``x0`` each bin's start
    (seconds into the run) and ``width_s`` its width; dashed rules where sessions resumed."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    end = max(end_s, width_s)
    if bars:
        stacked = [sum(values[i] for _, values in series) for i in range(len(x0))]
        top = max(stacked, default=0.0)
    else:
        top = max((max(values, default=0.0) for _, values in series), default=0.0)
    step = nice_step(top if top > 0 else 1.0)
    top = max(step, math.ceil(top / step) * step) if top > 0 else step * 4

    def sx(x: float) -> float:
        return LEFT + plot_w * x / end

    def sy(y: float) -> float:
        return TOP + plot_h * (1 - y / top)

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(label)}">'
    ]
    y = 0.0
    while y <= top + step / 2:
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{sy(y):.1f}" y2="{sy(y):.1f}"/>')
        parts.append(f'<text class="ylab" x="{LEFT - 6}" y="{sy(y) + 4:.1f}">{escape(number(y))}</text>')
        y += step
    tstep = _time_step(end)
    t = 0.0
    while t <= end + 1e-9:
        parts.append(f'<text class="xlab" x="{sx(t):.1f}" y="{HEIGHT - 8}">{escape(duration(t))}</text>')
        t += tstep
    for b in boundaries:
        parts.append(f'<line class="session" x1="{sx(b):.1f}" x2="{sx(b):.1f}" y1="{TOP}" y2="{TOP + plot_h}"/>')
    if bars:
        bar_w = max(1.0, plot_w * width_s / end - 0.5)
        base = [0.0] * len(x0)
        for i, (name, values) in enumerate(series):
            for j, v in enumerate(values):
                if v > 0:
                    y1, y2 = sy(base[j] + v), sy(base[j])
                    parts.append(
                        f'<rect x="{sx(x0[j]):.1f}" y="{y1:.1f}" width="{bar_w:.1f}" height="{max(0.8, y2 - y1):.1f}" '
                        f'fill="{colour(i)}" data-v="{v:g}"><title>{escape(name)}: {escape(number(v))}</title></rect>'
                    )
                    base[j] += v
    else:
        for i, (_, values) in enumerate(series):
            pairs = list(zip(x0, values, strict=True))
            if len(pairs) == 1:  # a run shorter than a bin: one point is no line; its bin, level
                (x, v), w = pairs[0], width_s / 2
                pairs = [(x - w, v), (x + w, v)]
            points = " ".join(f"{sx(x + width_s / 2):.1f},{sy(v):.1f}" for x, v in pairs)
            if points:
                parts.append(f'<polyline class="line" points="{points}" stroke="{colour(i)}"/>')
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{sy(0):.1f}" y2="{sy(0):.1f}"/>')
    parts.append("</svg>")
    return "".join(parts)


def latency_text(seconds: float) -> str:
    """Axis text for a latency: 2ms, 500ms, 1s, 20s."""
    return f"{seconds * 1000:.3g}ms" if seconds < 1 else f"{seconds:.3g}s"


def latency_ticks(lo: float, hi: float) -> list[float]:
    """Round latencies (seconds) between ``exp(lo)`` and ``exp(hi)`` to label a log axis:
    the decades when two fit, else 1-2-5 steps, else the two ends themselves (a run whose
    every latency falls in one decade still has a labelled axis)."""
    inside = [s for s in (10.0**k for k in range(-3, 4)) if lo <= math.log(s) <= hi]
    if len(inside) < 2:
        inside = [f * 10.0**k for k in range(-3, 4) for f in (1, 2, 5) if lo <= math.log(f * 10.0**k) <= hi]
    if len(inside) >= 2:
        return inside
    # The ends, and a round value between them where it leaves room for its label.
    ends = [math.exp(lo) * 1.02, math.exp(hi) / 1.02]
    room = (hi - lo) * 0.2
    middle = [s for s in inside if all(abs(math.log(s) - math.log(e)) >= room for e in ends)]
    return [ends[0], *middle, ends[1]]


def latency_histogram(buckets: dict[int, int], marks: Sequence[tuple[str, float]]) -> str:
    """Requests per latency bucket on a log time axis, with the percentiles marked."""
    if not buckets:
        return ""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    first = max(0, min(buckets) - 1)
    last = min(BUCKETS - 1, max(buckets) + 1)
    lo, hi = math.log(bucket_bounds(first)[0]), math.log(bucket_bounds(last)[1])
    top = float(max(buckets.values()))
    step = nice_step(top)
    top = max(step, math.ceil(top / step) * step)

    def sx(seconds: float) -> float:
        return LEFT + plot_w * (math.log(seconds) - lo) / (hi - lo)

    def sy(y: float) -> float:
        return TOP + plot_h * (1 - y / top)

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        'role="img" aria-label="latency histogram">'
    ]
    y = 0.0
    while y <= top + step / 2:
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{sy(y):.1f}" y2="{sy(y):.1f}"/>')
        parts.append(f'<text class="ylab" x="{LEFT - 6}" y="{sy(y) + 4:.1f}">{escape(number(y))}</text>')
        y += step
    for seconds in latency_ticks(lo, hi):
        if lo <= math.log(seconds) <= hi:
            parts.append(f'<text class="xlab" x="{sx(seconds):.1f}" y="{HEIGHT - 8}">{latency_text(seconds)}</text>')
            parts.append(
                f'<line class="grid" x1="{sx(seconds):.1f}" x2="{sx(seconds):.1f}" y1="{TOP}" y2="{TOP + plot_h}"/>'
            )
    for bucket, n in sorted(buckets.items()):
        low, high = bucket_bounds(bucket)
        x1, x2 = sx(low), sx(high)
        parts.append(
            f'<rect class="hbar" x="{x1 + 0.5:.1f}" y="{sy(n):.1f}" width="{max(1.0, x2 - x1 - 1):.1f}" '
            f'height="{sy(0) - sy(n):.1f}"><title>{escape(number(n))} requests, '
            f"{low * 1000:.3g}-{high * 1000:.3g} ms</title></rect>"
        )
    for i, (name, seconds) in enumerate(marks):
        x = sx(seconds)
        parts.append(f'<line class="mark" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + plot_h}"/>')
        parts.append(f'<text class="mlab" x="{x + 3:.1f}" y="{TOP + 12 + 13 * i}">{escape(name)}</text>')
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{sy(0):.1f}" y2="{sy(0):.1f}"/>')
    parts.append("</svg>")
    return "".join(parts)
