"""What the rest of a run will cost and take (SPEC §16), projected from a sample of real
rows (``RunOptions(sample_rows=K)``: generated, kept in the checkpoint and the response
cache, so the run continues after them).

Per model: requests per row (a plugin may call a model several times per row; answers
the cache gave are counted apart and not projected as paid), input and output tokens per
request (mean, p95), latency; for the rows still to do: requests, tokens, cost (expected,
and worst case with every answer at the bound the budget reserves: ``CostMeter.output_bound``
times the answers a request asks for). Duration per provider: the larger of
what its concurrency allows at the measured latency, its ``rate_limit``, and the limits
its endpoint advertises (``x-ratelimit-limit-*``); the largest names the binding limit.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from genwire.config.schema import OpenAIProviderConfig
from genwire.container.core import WiredPipeline
from genwire.providers.budget.figures import ModelStats, answers_asked, max_tokens_of, p95
from genwire.providers.budget.meter import CostMeter
from genwire.providers.pricing import Price

__all__ = ["Estimate", "ModelProjection", "estimate_of", "project"]

if TYPE_CHECKING:
    from collections.abc import Callable

    from genwire.engine.records.result import RunResult

SECONDS_PER_MINUTE = 60.0


@dataclass
class ModelProjection:
    alias: str
    provider: str
    sample_requests: int  # paid in the sample (probes not included)
    sample_cached: int  # answers the response cache gave in the sample
    requests_per_row: float  # paid
    input_tokens_mean: float
    input_tokens_p95: float
    output_tokens_mean: float
    output_tokens_p95: float
    latency_s_mean: float
    rate_limited: int  # 429s in the sample
    requests: int  # projected, the rows still to do
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    worst_cost_usd: float | None
    price_source: str


@dataclass
class ProviderDuration:
    provider: str
    duration_s: float
    binding_limit: str


@dataclass
class Estimate:
    sample_rows: int
    sample_failed: int
    sample_duration_s: float
    sample_cost_usd: float | None  # this session, probes included
    rows_total: int
    rows_done: int  # in the checkpoint now, the sample's included
    rows_left: int
    batch: bool
    models: list[ModelProjection]
    providers: list[ProviderDuration]
    requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    worst_cost_usd: float | None
    duration_s: float
    binding_limit: str
    # Where the cap's reservations would hold a model below its max_concurrency (SPEC §16).
    narrowed: list[str] = field(default_factory=list)
    # Ray: the workers' start-up measured in the sample, part of ``duration_s`` (the run starts them again).
    workers_start_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["models"] = {m["alias"]: {k: v for k, v in m.items() if k != "alias"} for m in out["models"]}
        out["providers"] = {p["provider"]: {k: v for k, v in p.items() if k != "provider"} for p in out["providers"]}
        return {"ok": True, **out}


def _cost(price: Price | None, inp: float, out: float, batch: bool) -> float | None:
    return None if price is None else price.cost(round(inp), round(out), batched=batch)


def project(
    container: WiredPipeline,
    *,
    stats: dict[str, ModelStats],
    prices: dict[str, Price | None],
    cached: dict[str, int],
    rate_limited: dict[str, int],
    sample_rows: int,
    sample_failed: int,
    sample_duration_s: float,
    sample_cost_usd: float | None,
    rows_total: int,
    rows_done: int,
    output_bound: Callable[[str, int], int],
    sample_cpu_s: float = 0.0,
    batch: bool = False,
    workers_start_s: float | None = None,
) -> Estimate:
    """``output_bound(alias, max_tokens)``: the most output tokens one answer may have, as
    the budget reserves it (``CostMeter.output_bound``): the worst case is the same number."""
    config = container.config
    rows_left = max(0, rows_total - rows_done)
    tried = sample_rows + sample_failed
    models: list[ModelProjection] = []
    for alias in sorted(prices):
        model = config.models[alias]
        s = stats.get(alias, ModelStats())
        per_row = s.requests / tried if tried else 0.0
        requests = math.ceil(per_row * rows_left)
        in_mean = statistics.fmean(s.input_tokens) if s.input_tokens else 0.0
        out_mean = statistics.fmean(s.output_tokens) if s.output_tokens else 0.0
        params = model.params
        bound = output_bound(alias, max_tokens_of(params)) * answers_asked(params) if model.kind == "chat" else 0
        price = prices[alias]
        models.append(
            ModelProjection(
                alias=alias,
                provider=model.providers[0],  # a pool: projected on its first endpoint (conservative)
                sample_requests=s.requests,
                sample_cached=cached.get(alias, 0),
                requests_per_row=per_row,
                input_tokens_mean=in_mean,
                input_tokens_p95=p95(s.input_tokens),
                output_tokens_mean=out_mean,
                output_tokens_p95=p95(s.output_tokens),
                latency_s_mean=statistics.fmean(s.latencies) if s.latencies else 0.0,
                rate_limited=rate_limited.get(alias, 0),
                requests=requests,
                input_tokens=round(requests * in_mean),
                output_tokens=round(requests * out_mean),
                cost_usd=_cost(price, requests * in_mean, requests * out_mean, batch),
                worst_cost_usd=_cost(price, requests * in_mean, requests * bound, batch),
                price_source=price.source if price is not None else "unknown",
            )
        )
    # genwire's own work per row (templates, JSON, checkpoint) on this machine's CPU: one
    # event loop does it, so under load it adds to every request's time in flight.
    cpu_s = sample_cpu_s / tried * rows_left if tried else 0.0
    providers = _durations(container, models, stats, batch, cpu_s)
    slowest = max(providers, key=lambda p: p.duration_s, default=None)
    # A row's own path: its requests one after another (the first rows and the last wait it out).
    chain = sum(m.latency_s_mean * math.ceil(m.requests_per_row) for m in models) if rows_left else 0.0
    costs = [m.cost_usd for m in models]
    worst = [m.worst_cost_usd for m in models]
    return Estimate(
        sample_rows=sample_rows,
        sample_failed=sample_failed,
        sample_duration_s=sample_duration_s,
        sample_cost_usd=sample_cost_usd,
        rows_total=rows_total,
        rows_done=rows_done,
        rows_left=rows_left,
        batch=batch,
        models=models,
        providers=providers,
        requests=sum(m.requests for m in models),
        input_tokens=sum(m.input_tokens for m in models),
        output_tokens=sum(m.output_tokens for m in models),
        cost_usd=None if None in costs else sum(c for c in costs if c is not None),
        worst_cost_usd=None if None in worst else sum(c for c in worst if c is not None),
        duration_s=(slowest.duration_s if slowest else 0.0) + chain + (workers_start_s or 0.0),
        binding_limit=slowest.binding_limit if slowest else "none",
        workers_start_s=workers_start_s,
    )


def _durations(
    container: WiredPipeline, models: list[ModelProjection], stats: dict[str, ModelStats], batch: bool, cpu_s: float
) -> list[ProviderDuration]:
    config = container.config
    out: list[ProviderDuration] = []
    for name in sorted({m.provider for m in models}):
        mine = [m for m in models if m.provider == name]
        provider = config.providers[name]
        limit = provider.max_concurrency
        waiting = sum(m.requests * m.latency_s_mean for m in mine) / limit
        busy = f"max_concurrency {limit} ({name})" if waiting >= cpu_s else "this machine's CPU (genwire's own work)"
        bounds: list[tuple[float, str]] = [(waiting + cpu_s, busy)]
        if isinstance(provider, OpenAIProviderConfig):
            if batch:  # a batch ends within its window, whatever the online limits
                window = provider.batch.completion_window
                out.append(ProviderDuration(name, float(window[:-1]) * 3600, f"within the completion window {window}"))
                continue
            pacing = provider.rate_limit
            if pacing is not None and pacing.requests_per_minute:
                rpm = pacing.requests_per_minute
                paced = sum(m.requests for m in mine) / rpm * SECONDS_PER_MINUTE
                bounds.append((paced, f"rate_limit {rpm:g} requests/min ({name})"))
            if pacing is not None and pacing.tokens_per_minute:
                tpm = pacing.tokens_per_minute
                tokens = sum(m.input_tokens + m.output_tokens for m in mine)
                bounds.append((tokens / tpm * SECONDS_PER_MINUTE, f"rate_limit {tpm:g} tokens/min ({name})"))
            for m in mine:  # endpoints advertise per model
                s = stats.get(m.alias)
                if s is not None and s.limit_requests:
                    bounds.append(
                        (
                            m.requests / s.limit_requests * SECONDS_PER_MINUTE,
                            f"x-ratelimit-limit-requests {s.limit_requests:,}/min ({m.alias})",
                        )
                    )
                if s is not None and s.limit_tokens:
                    bounds.append(
                        (
                            (m.input_tokens + m.output_tokens) / s.limit_tokens * SECONDS_PER_MINUTE,
                            f"x-ratelimit-limit-tokens {s.limit_tokens:,}/min ({m.alias})",
                        )
                    )
        seconds, binding = max(bounds, key=lambda b: b[0])
        out.append(ProviderDuration(name, seconds, binding))
    return out


def estimate_of(container: WiredPipeline, sample: RunResult, *, batch: bool = False) -> Estimate:
    """The projection from a run made with ``RunOptions(sample_rows=K)``."""
    meter = sample.meter
    if meter is None:
        raise ValueError("the sample run kept no cost measurements")
    rows, failed = sample.rows_written - sample.rows_resumed, sample.rows_failed
    total, done = sample.rows_requested, sample.rows_written
    if sample.funnel is not None:  # a gated pipeline (SPEC §21): projected in candidates
        from genwire.engine.gates.estimate import candidate_counts

        rows, failed, total, done = candidate_counts(sample)
    found = project(
        container,
        stats=meter.stats,
        prices=meter.prices,
        cached={alias: u.cached for alias, u in sample.usage.items()},
        rate_limited={alias: u.rate_limited for alias, u in sample.usage.items()},
        sample_rows=rows,
        sample_failed=failed,
        sample_duration_s=sample.duration_s,
        sample_cost_usd=sample.cost["this_session_usd"] if sample.cost else None,
        rows_total=total,
        rows_done=done,
        output_bound=meter.output_bound,
        sample_cpu_s=meter.rows_cpu_s,
        batch=batch,
        workers_start_s=sample.workers_start_s,
    )
    found.narrowed = narrowing(container, meter, found)
    return found


def narrowing(container: WiredPipeline, meter: CostMeter, found: Estimate) -> list[str]:
    """Where the cost cap's reservations narrow a model's requests in flight: the budget
    left is below its ``max_concurrency`` worst cases (each at the bound the budget holds)."""
    if meter.max_cost_usd is None:
        return []
    said = [meter.narrowed.text() + " (in the sample)"] if meter.narrowed is not None else []
    left = max(0.0, meter.max_cost_usd - meter.spent_usd)
    config = container.config
    for m in found.models:
        model = config.models[m.alias]
        limit = meter.concurrency.get(m.alias)
        stats = meter.stats.get(m.alias)
        if model.kind != "chat" or limit is None or not m.requests:
            continue
        if meter.narrowed is not None and meter.narrowed.alias == m.alias:
            continue  # the sample said it already
        ratio = stats.chars_per_token if stats is not None and stats.chars_per_token else 1.0
        chars = math.ceil(m.input_tokens_p95 * ratio)
        max_tokens = max_tokens_of(model.params)
        _, worst = meter.worst_case(m.alias, chars, max_tokens, answers=answers_asked(model.params))
        if worst > 0 and left < limit * worst:
            said.append(
                f"the budget will narrow model {m.alias}'s requests in flight to about {int(left // worst):,} of "
                f"its max_concurrency {limit:,}: ${left:.3g} left is below {limit:,} worst cases of ${worst:.3g} "
                f"(each reserves {meter.output_bound(m.alias, max_tokens):,} output tokens)"
            )
    return said
