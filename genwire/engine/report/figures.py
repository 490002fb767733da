"""What a run's report holds, as figures (SPEC §19): per model totals, the per-second
points binned for the plots, the failure classes, and the latency quantiles from the
buckets. ``report.data`` fills them from the checkpoint folder; ``report.page`` and the
hand-off read them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from genwire.engine.report.about import RunAbout
from genwire.engine.report.funnel import FunnelData
from genwire.providers.metrics import bucket_bounds

MAX_POINTS = 360  # per plot: about one per 2 px at the page's width


@dataclass
class ModelTotals:
    """One alias over every session: the ``ModelUsage`` counters (``requests``,
    ``cached``, ``rate_limited``, tokens, ``usd`` when counted...), attempts' latency
    buckets, failed attempts and given-up requests by class, and the most in flight."""

    counters: dict[str, float] = field(default_factory=dict)
    latency: dict[int, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    gave_up: dict[str, int] = field(default_factory=dict)
    peak_in_flight: int = 0

    def count(self, name: str) -> float:
        return self.counters.get(name, 0)

    @property
    def retries_by_class(self) -> dict[str, int]:
        """Failed attempts that were tried again, by class."""
        out = {c: n - self.gave_up.get(c, 0) for c, n in self.errors.items()}
        return {c: n for c, n in sorted(out.items()) if n > 0}


@dataclass
class Point:
    """One tick: ``x`` seconds into the run (sessions laid end to end), ``dt`` long."""

    x: float
    dt: float
    rows: int
    failed: int
    requests: dict[str, float]
    limited: dict[str, float]
    in_flight: dict[str, int]


@dataclass
class Bin:
    """Points binned for a plot: sums over ``width`` seconds starting at ``x``, and the
    most in flight at once."""

    x: float
    width: float
    rows: float = 0.0
    failed: float = 0.0
    requests: dict[str, float] = field(default_factory=dict)
    limited: dict[str, float] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)


@dataclass
class FailureGroup:
    count: int = 0
    examples: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ReportData:
    output: str
    outcome: str = "unfinished"
    message: str = ""
    sessions: int = 0
    started: float | None = None  # Unix time the first session began
    active_s: float = 0.0  # the sessions' durations, added up
    preflight_s: float = 0.0  # the sessions' pre-flights, added up
    generating_s: float = 0.0  # the sessions' time after a pre-flight that passed (or was skipped)
    rows_requested: int | None = None
    rows_written: int = 0
    rows_failed: int = 0
    rows_resumed: int = 0
    summary: dict[str, Any] | None = None  # a finished session's --json summary
    ended_cost: dict[str, Any] | None = None  # the last session's "cost" object, however it ended
    fingerprint: Any = None  # the checkpoint's (meta.json): a finished run's page marks it (report.finished)
    models: dict[str, ModelTotals] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)
    boundaries: list[float] = field(default_factory=list)  # x where a resumed session starts
    preflight: dict[str, Any] | None = None
    failures: dict[str, FailureGroup] = field(default_factory=dict)
    samples: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    served: dict[str, str] = field(default_factory=dict)  # alias -> the model name it sends
    notes: list[str] = field(default_factory=list)
    funnel: FunnelData | None = None  # a gated run (SPEC §21)
    about: RunAbout = field(default_factory=RunAbout)  # what the dataset card says (SPEC §24)

    @property
    def cached(self) -> int:
        return int(sum(m.count("cached") for m in self.models.values()))

    def cost(self) -> dict[str, float] | None:
        """USD per alias, when every alias's cost is known (a ``usd`` counter); else None."""
        if not self.models or any("usd" not in m.counters for m in self.models.values()):
            return None
        return {alias: m.counters["usd"] for alias, m in self.models.items()}

    def bins(self, count: int = MAX_POINTS) -> list[Bin]:
        """The points in at most ``count`` equal bins over the run (empty ones included).
        A tick's counts are spread over the bins its interval overlaps, in proportion
        (ticks are about a second apart, never exactly: no bin gets two and its neighbour
        none); its most-in-flight goes to each of them."""
        if not self.points:
            return []
        end = max(self.active_s, max(p.x for p in self.points))
        width = max(1.0, end / count)
        bins = [Bin(i * width, width) for i in range(int(end // width) + 1)]
        last = len(bins) - 1
        for p in self.points:
            start = max(0.0, p.x - p.dt)
            first, final = min(int(start // width), last), min(int(p.x // width), last)
            if final > first and p.x == bins[final].x:  # ends exactly where a bin starts
                final -= 1
            span = max(p.x - start, 1e-9)
            for i in range(first, final + 1):
                b = bins[i]
                share = 1.0 if first == final else max(0.0, min(p.x, b.x + width) - max(start, b.x)) / span
                b.rows += p.rows * share
                b.failed += p.failed * share
                for alias, n in p.requests.items():
                    b.requests[alias] = b.requests.get(alias, 0) + n * share
                for alias, n in p.in_flight.items():
                    b.in_flight[alias] = max(b.in_flight.get(alias, 0), n)
            # 429s are events, counted whole: in the bin of the tick's middle.
            middle = bins[min(int((start + p.x) / 2 // width), last)]
            for alias, n in p.limited.items():
                middle.limited[alias] = middle.limited.get(alias, 0) + n
        return bins


def percentile(buckets: dict[int, int], q: float) -> float | None:
    """The ``q`` quantile (0-1) of latencies kept as buckets: interpolated inside its bucket."""
    total = sum(buckets.values())
    if not total:
        return None
    rank = q * total
    seen = 0
    for bucket in sorted(buckets):
        n = buckets[bucket]
        if seen + n >= rank:
            low, high = bucket_bounds(bucket)
            return low + (high - low) * ((rank - seen) / n if n else 0)
        seen += n
    return bucket_bounds(max(buckets))[1]


def merged_latency(models: dict[str, ModelTotals]) -> dict[int, int]:
    out: dict[int, int] = {}
    for m in models.values():
        for b, n in m.latency.items():
            out[b] = out.get(b, 0) + n
    return out
