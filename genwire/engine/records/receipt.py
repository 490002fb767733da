"""What a Ray worker paid for, sent back with its rows (SPEC §22): the driver is the one
writer of the run's accounting (``engine.money.accounts``), and a worker's ``Receipt`` is how
its requests reach it — usage, ledger entries, per-second request figures and a pool's
per-endpoint figures, each the difference since the worker's last receipt, so that the
receipts of a run add up to exactly what its workers did."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from genwire.providers.budget.figures import ModelStats, Narrowed, Paid
from genwire.providers.budget.meter import CostMeter
from genwire.providers.metrics import AliasSecond, RequestRecorder
from genwire.providers.pool.endpoints import EndpointStats
from genwire.providers.request_context import current_column, current_rows
from genwire.providers.usage import Concurrency, ModelUsage

__all__ = ["LedgerEntry", "Receipt", "ReceiptBook"]

Endpoints = dict[str, dict[str, EndpointStats]]


@dataclass(frozen=True)
class LedgerEntry:
    """One paid answer and the rows and column it was paid for (a ledger line)."""

    paid: Paid
    rows: tuple[int, ...]
    column: str | None


@dataclass
class Receipt:
    usage: dict[str, ModelUsage] = field(default_factory=dict)
    paid: list[LedgerEntry] = field(default_factory=list)
    seconds: dict[str, AliasSecond] = field(default_factory=dict)
    endpoints: Endpoints = field(default_factory=dict)
    stats: dict[str, ModelStats] = field(default_factory=dict)  # what the estimate measures, per model
    cpu_s: float = 0.0  # the worker process's CPU time
    worker: int = 0
    narrowed: Narrowed | None = None  # the first time its budget's reservations narrowed its requests in flight
    concurrency: dict[str, Concurrency] = field(default_factory=dict)  # per provider: the worker's gates now
    since: float | None = None  # Unix time of the worker's previous receipt: its figures happened since


class ReceiptBook:
    """A worker's side: what it paid since its last receipt. ``paid`` is its cost meter's
    ``record``; ``recorder`` records its requests (``providers.metrics``)."""

    def __init__(self) -> None:
        self.recorder = RequestRecorder()
        self._paid: list[LedgerEntry] = []
        self._usage: dict[str, ModelUsage] = {}
        self._endpoints: dict[tuple[str, str], tuple[int, int, int]] = {}
        self._stats: dict[str, tuple[int, int]] = {}  # per alias: the requests and measurements already sent
        self._cpu_s = time.process_time()
        self._since = time.time()
        self.worker = 0
        self.meter: CostMeter | None = None  # the worker's, once it has one
        self.on_paid: Callable[[], None] = lambda: None  # told of every paid answer

    def paid(self, paid: Paid) -> None:
        self._paid.append(LedgerEntry(paid, tuple(current_rows()), current_column()))
        self.on_paid()

    def take(
        self,
        usage: Mapping[str, ModelUsage],
        endpoints: Endpoints,
        concurrency: Mapping[str, Concurrency] | None = None,
    ) -> Receipt:
        """The receipt since the last one, given the worker's totals now."""
        paid, self._paid = self._paid, []
        cpu_s, self._cpu_s = self._cpu_s, time.process_time()
        receipt = Receipt(paid=paid, seconds=self.recorder.take(), cpu_s=self._cpu_s - cpu_s, worker=self.worker)
        receipt.since, self._since = self._since, time.time()
        receipt.narrowed = self.meter.narrowed if self.meter is not None else None
        receipt.concurrency = dict(concurrency or {})
        if self.meter is not None:
            for alias, measured in self.meter.stats.items():
                sent, sent_measured = self._stats.get(alias, (0, 0))
                if measured.requests > sent:
                    receipt.stats[alias] = ModelStats(
                        requests=measured.requests - sent,
                        input_tokens=measured.input_tokens[sent_measured:],
                        output_tokens=measured.output_tokens[sent_measured:],
                        latencies=measured.latencies[sent_measured:],
                        chars_per_token=measured.chars_per_token,
                        limit_requests=measured.limit_requests,
                        limit_tokens=measured.limit_tokens,
                    )
                    self._stats[alias] = (measured.requests, len(measured.latencies))
        for alias, now in usage.items():
            change = _minus(now, self._usage.get(alias, ModelUsage()))
            if any(vars(change).values()):
                receipt.usage[alias] = change
            self._usage[alias] = dataclasses.replace(now)
        for alias, stats in endpoints.items():
            for name, now_stats in stats.items():
                requests, failures, latencies = self._endpoints.get((alias, name), (0, 0, 0))
                change_stats = EndpointStats(
                    now_stats.requests - requests, now_stats.failures - failures, now_stats.latencies[latencies:]
                )
                if change_stats.requests or change_stats.failures or change_stats.latencies:
                    receipt.endpoints.setdefault(alias, {})[name] = change_stats
                self._endpoints[(alias, name)] = (now_stats.requests, now_stats.failures, len(now_stats.latencies))
        return receipt


def _minus(now: ModelUsage, before: ModelUsage) -> ModelUsage:
    return ModelUsage(**{name: value - getattr(before, name) for name, value in vars(now).items()})


def add_endpoints(into: Endpoints, more: Endpoints) -> None:
    """Add ``more``'s per-endpoint figures to ``into``'s."""
    for alias, stats in more.items():
        for name, extra in stats.items():
            mine = into.setdefault(alias, {}).setdefault(name, EndpointStats())
            mine.requests += extra.requests
            mine.failures += extra.failures
            mine.latencies.extend(extra.latencies)


def add_stats(meter: CostMeter, more: Mapping[str, ModelStats]) -> None:
    """Add a worker's measurements (``Receipt.stats``) to ``meter``'s: what the estimate reads."""
    for alias, extra in more.items():
        mine = meter.stats_of(alias)
        mine.add(extra)
        if extra.chars_per_token and (mine.chars_per_token is None or extra.chars_per_token < mine.chars_per_token):
            mine.chars_per_token = extra.chars_per_token
        mine.limit_requests = extra.limit_requests or mine.limit_requests
        mine.limit_tokens = extra.limit_tokens or mine.limit_tokens


def add_seconds(recorder: RequestRecorder, seconds: Mapping[str, AliasSecond]) -> None:
    """Add a worker's request figures to this interval of ``recorder``."""
    for alias, extra in seconds.items():
        recorder.add(alias, extra)


def cluster_concurrency(
    driver: Mapping[str, Concurrency], workers: Mapping[int, Mapping[str, Concurrency]]
) -> dict[str, Concurrency]:
    """Per provider, the driver's gates with its workers' (each worker's latest word): the
    workers' peaks add up (each had its own share of ``max_concurrency`` in flight; their
    sum bounds the cluster's peak and is what a server saw when they peaked together, as
    they do at a run's start), as do their limits, pauses and queues; the driver's own
    peak (its pre-flight's probes) counts when it is higher."""
    merged = dict(driver)
    for name in {name for gates in workers.values() for name in gates}:
        shares = [gates[name] for gates in workers.values() if name in gates]
        own = driver.get(name)
        peak = sum(share.peak_in_flight for share in shares)
        merged[name] = Concurrency(
            in_flight=sum(share.in_flight for share in shares),
            limit=sum(share.limit for share in shares),
            max_concurrency=own.max_concurrency if own is not None else sum(s.max_concurrency for s in shares),
            peak_in_flight=max(peak, own.peak_in_flight if own is not None else 0),
            pauses=sum(share.pauses for share in shares),
            waiting=sum(share.waiting for share in shares),
        )
    return merged


def latest_gates(before: Mapping[str, Concurrency], now: Mapping[str, Concurrency]) -> dict[str, Concurrency]:
    """A worker's latest gates, each with the highest peak it reported (a worker Ray
    restarted starts its gates afresh)."""
    latest = dict(before)
    for name, gate in now.items():
        peak = max(gate.peak_in_flight, before[name].peak_in_flight if name in before else 0)
        latest[name] = dataclasses.replace(gate, peak_in_flight=peak)
    return latest
