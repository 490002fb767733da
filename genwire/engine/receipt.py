"""What a Ray worker paid for, sent back with its rows (SPEC §22): the driver is the one
writer of the run's accounting (``engine.accounts``), and a worker's ``Receipt`` is how
its requests reach it — usage, ledger entries, per-second request figures and a pool's
per-endpoint figures, each the difference since the worker's last receipt, so that the
receipts of a run add up to exactly what its workers did."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from genwire.providers.budget import CostMeter, ModelStats, Narrowed, Paid
from genwire.providers.metrics import AliasSecond, RequestRecorder
from genwire.providers.pool import EndpointStats
from genwire.providers.request_context import current_column, current_rows
from genwire.providers.usage import ModelUsage

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
        self.worker = 0
        self.meter: CostMeter | None = None  # the worker's, once it has one

    def paid(self, paid: Paid) -> None:
        self._paid.append(LedgerEntry(paid, tuple(current_rows()), current_column()))

    def take(self, usage: Mapping[str, ModelUsage], endpoints: Endpoints) -> Receipt:
        """The receipt since the last one, given the worker's totals now."""
        paid, self._paid = self._paid, []
        cpu_s, self._cpu_s = self._cpu_s, time.process_time()
        receipt = Receipt(paid=paid, seconds=self.recorder.take(), cpu_s=self._cpu_s - cpu_s, worker=self.worker)
        receipt.narrowed = self.meter.narrowed if self.meter is not None else None
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
