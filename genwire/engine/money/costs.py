"""A run's money (SPEC §16): prices resolved, the budget checked before anything is sent,
the cost meter attached to every HTTP provider the run uses, the ledger in the
checkpoint, and the ``"cost"`` object of the summary."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from genwire.config.schema import LocalProviderConfig, OpenAIProviderConfig
from genwire.container.core import WiredPipeline
from genwire.engine.records.ledger import RunLedger
from genwire.engine.records.receipt import LedgerEntry
from genwire.errors import BudgetStopped, RunSetupError
from genwire.providers.budget.figures import Narrowed, answers_asked
from genwire.providers.budget.meter import CostMeter
from genwire.providers.money import usd as money
from genwire.providers.pricing import Price, PriceTable, load_price_table, model_output_limits, model_prices
from genwire.providers.probes import CHAT_PROBE_PROMPT, STRUCTURED_PROBE_TOKENS
from genwire.providers.usage import ModelUsage

__all__ = ["RunCosts", "attach_meter", "priced_models", "used_models"]

LOCAL_PRICE = Price(0.0, 0.0, 0.0, 0.0, "local (embedded model: no charge)")
PROBE_BODY_CHARS = 2 * len(CHAT_PROBE_PROMPT) + 400  # a probe's JSON body, generously


def used_models(container: WiredPipeline) -> list[str]:
    """The model aliases some column reaches (the pre-flight's model targets)."""
    return sorted(t.name for t in container.plan().targets if t.name in container.config.models)


def _price_table(container: WiredPipeline) -> tuple[PriceTable | None, str]:
    config = container.config
    if config.pricing is None:
        return None, "pricing"
    path = container.loaded.resolve_path(config.pricing.source)
    return load_price_table(path), path.name


def output_limits(container: WiredPipeline) -> dict[str, int]:
    """Every used model's output limit that the config or the price table gives."""
    table, name = _price_table(container)
    limits = model_output_limits(container.config, table, name)
    return {alias: limit for alias, limit in limits.items() if alias in used_models(container)}


def model_concurrency(container: WiredPipeline) -> dict[str, int]:
    """Every used model's requests in flight at most: its providers' ``max_concurrency``
    (a pool's members' together)."""
    config = container.config
    return {
        alias: sum(config.providers[name].max_concurrency for name in config.models[alias].providers)
        for alias in used_models(container)
    }


def priced_models(container: WiredPipeline) -> dict[str, Price | None]:
    """Every used model's price; an embedded (local) model costs nothing."""
    config = container.config
    table, name = _price_table(container)
    prices = model_prices(config, table, name)
    out: dict[str, Price | None] = {}
    for alias in used_models(container):
        provider = config.providers.get(config.models[alias].providers[0])  # a pool's are all openai
        out[alias] = (
            LOCAL_PRICE if isinstance(provider, LocalProviderConfig) and prices[alias] is None else prices[alias]
        )
    return out


def attach_meter(container: WiredPipeline, aliases: Iterable[str], meter: CostMeter) -> list[Any]:
    """Every provider serving one of ``aliases`` (HTTP endpoints and the embedded models
    alike: one accounting for all) meters its requests with ``meter`` from now on; returns
    their clients (set their ``meter`` to None to detach)."""
    config = container.config
    names = {name for alias in aliases for name in config.models[alias].providers}  # a pool: each endpoint's
    clients = []
    for name in sorted(names):
        if isinstance(config.providers.get(name), OpenAIProviderConfig | LocalProviderConfig):
            client = container.client(name)
            client.meter = meter
            clients.append(client)
    return clients


class RunCosts:
    """The meter and the ledger of one session over a checkpoint directory."""

    def __init__(
        self,
        container: WiredPipeline,
        *,
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        engine: str = "local",
    ) -> None:
        """Prices resolved and the caps checked; nothing is opened yet."""
        self.container = container
        self.engine = engine
        self.prices = priced_models(container)
        self.output_limits = output_limits(container)
        self.concurrency = model_concurrency(container)
        budget = container.config.pipeline.budget
        self.max_cost_usd = max_cost_usd if max_cost_usd is not None else (budget.max_cost_usd if budget else None)
        self.max_tokens = max_tokens if max_tokens is not None else (budget.max_tokens if budget else None)
        if self.max_cost_usd is not None:
            unpriced = [alias for alias, price in self.prices.items() if price is None]
            if unpriced:
                raise RunSetupError(
                    f"a cost cap (${self.max_cost_usd:g}) cannot be enforced: no price for model(s) "
                    + ", ".join(unpriced)
                    + "; give each one models.<alias>.price: {input_per_mtok: ..., output_per_mtok: ...} "
                    "(or a pricing: {source: FILE} table), or cap tokens with pipeline.budget.max_tokens instead"
                )
        self.ledger: RunLedger | None = None
        self.meter = self._meter()
        self._clients: list[Any] = []

    def _meter(self, **earlier: Any) -> CostMeter:
        """The run's one meter: its prices, limits and caps, plus what ``earlier`` says was spent."""
        return CostMeter(
            self.prices,
            output_limits=self.output_limits,
            max_cost_usd=self.max_cost_usd,
            max_tokens=self.max_tokens,
            concurrency=self.concurrency,
            **earlier,
        )

    def open(self, directory: Path, *, probing: bool) -> None:
        """The ledger of the checkpoint ``directory`` (what earlier sessions paid counts
        against the cap), then the refusal of a cap the pre-flight alone could pass."""
        self.ledger = ledger = RunLedger(directory)
        self.meter = self._meter(
            spent_usd=ledger.earlier_usd,
            spent_tokens=ledger.earlier_tokens,
            record=ledger.record,
        )
        self._check_preflight_fits(probing)

    def exhausted(self) -> bool:
        return self.meter.exhausted

    def hold_rows(self, rows_done: int, rows_live: int, batch_rows: int) -> bool:
        """Near the cap, take no new rows for now: what is left would be spent on rows
        that cannot all finish (each would keep only its first columns' answers)."""
        meter = self.meter
        if meter.exhausted:
            return True
        if not meter.capped:
            return False
        if meter.waiting or rows_done == 0:
            return True  # requests already wait for room; or no row has shown yet what one costs
        # What a row costs, from this session (the live rows' spend so far included: an
        # overestimate), against what the live rows and one more batch would need.
        needed = (rows_live + batch_rows) / rows_done
        if meter.max_cost_usd is not None:
            left = meter.max_cost_usd - meter.spent_usd - meter.reserved_usd
            if left < meter.session_usd * needed:
                return True
        if meter.max_tokens is not None:
            left_tokens = meter.max_tokens - meter.spent_tokens - meter.reserved_tokens
            if left_tokens < meter.session_tokens * needed:
                return True
        return False

    @property
    def paid(self) -> bool:
        """Some answer was paid for in this run (the checkpoint keeps the ledger)."""
        return self.ledger is not None and self.ledger.entries > 0

    def _check_preflight_fits(self, probing: bool) -> None:
        """Refuse, before any request, a cap below what the pre-flight alone may cost."""
        if not probing or not self.meter.capped:
            return
        config = self.container.config
        tokens = 0
        usd = 0.0
        for alias in self.prices:
            model = config.models[alias]
            if not model.health_check:
                continue
            output = model.kind == "chat"
            bound = max(model.probe_max_tokens, STRUCTURED_PROBE_TOKENS) if output else 0
            answers = answers_asked(model.params)  # a probe sends the model's params, n too
            t, u = self.meter.worst_case(alias, PROBE_BODY_CHARS, bound, output=output, answers=answers)
            tokens, usd = tokens + t, usd + u
        left_usd = None if self.max_cost_usd is None else self.max_cost_usd - self.meter.spent_usd
        left_tokens = None if self.max_tokens is None else self.max_tokens - self.meter.spent_tokens
        if (left_usd is not None and usd > left_usd) or (left_tokens is not None and tokens > left_tokens):
            if left_usd is not None:
                left = f"{money(left_usd)} of ${self.max_cost_usd:g} ({money(self.meter.spent_usd)} spent)"
            else:
                left = f"{left_tokens:,} of {self.max_tokens:,} tokens ({self.meter.spent_tokens:,} spent)"
            raise RunSetupError(
                f"the budget is below what the pre-flight alone may cost (up to {money(usd)}, {tokens:,} tokens; "
                f"left: {left}); raise --max-cost (or pipeline.budget), or run with --skip-preflight"
            )

    def attach(self) -> None:
        """Every provider a used model is served by meters its requests from now on: HTTP
        endpoints and the embedded (local) models alike, one accounting for all."""
        self._clients.extend(attach_meter(self.container, self.prices, self.meter))

    def detach(self) -> None:
        self.meter.end_rows()
        for client in self._clients:
            client.meter = None
        self._clients.clear()
        if self.ledger is not None:
            self.ledger.close()

    def paid_elsewhere(self, entry: LedgerEntry) -> None:
        """An answer a Ray worker paid for: spent against the cap, and in the ledger."""
        self.meter.paid_elsewhere(entry.paid)
        if self.ledger is not None:
            self.ledger.record(entry.paid, entry.rows, entry.column)

    def stopped(self, checkpoint: Path, kept: int, total: int, result: Any = None) -> BudgetStopped:
        """The budget stop, carrying the session's ``result`` (its summary and cost)."""
        meter = self.meter
        parts = []
        if meter.max_cost_usd is not None:
            parts.append(f"spent {money(meter.spent_usd)} of the ${meter.max_cost_usd:g} cap")
        if meter.max_tokens is not None:
            parts.append(f"{meter.spent_tokens:,} of the {meter.max_tokens:,}-token cap")
        return BudgetStopped(
            f"stopped at the budget: {', '.join(parts)}{meter.refusal_hint()}; "
            f"{kept:,} of {total:,} rows are kept in {checkpoint}. "
            "To go on, rerun the same command with a higher --max-cost (or raise pipeline.budget)",
            checkpoint=checkpoint,
            kept=kept,
            spent_usd=meter.spent_usd,
            cap_usd=meter.max_cost_usd,
            result=result,
        )

    def report(self, usage: Mapping[str, ModelUsage]) -> dict[str, Any]:
        """The summary's ``"cost"`` (SPEC §16): unrounded; None where a price is unknown."""
        by_model: dict[str, Any] = {}
        total: float | None = 0.0
        session: float | None = self.meter.session_usd
        saved: float | None = 0.0
        totals = self.ledger.totals if self.ledger is not None else {}  # Ray's workers' answers too
        for alias in sorted(set(self.prices) | set(totals)):
            price = self.prices.get(alias)
            paid = totals.get(alias)
            used = usage.get(alias)
            if paid is None:
                usd: float | None = 0.0 if price is not None else None
            else:
                usd = paid.usd if paid.unpriced == 0 else None
            if paid is not None and paid.unpriced and session is not None:
                session = None
            if usd is None and paid is not None and paid.requests:
                total = None
            elif total is not None and usd is not None:
                total += usd
            if used is not None and used.cached:
                if price is None:
                    saved = None
                elif saved is not None:
                    saved += price.cost(used.saved_prompt_tokens, used.saved_completion_tokens)
            by_model[alias] = {
                "input_tokens": paid.input_tokens if paid else 0,
                "output_tokens": paid.output_tokens if paid else 0,
                "requests": paid.requests if paid else 0,
                "usd": usd,
                "price_source": price.source if price is not None else "unknown",
            }
        return {
            "total_usd": total,
            "this_session_usd": session,
            "saved_by_cache_usd": saved,
            "by_model": by_model,
            "max_cost_usd": self.max_cost_usd,
            "max_tokens": self.max_tokens,
            "narrowed": narrowed_figures(self.meter.narrowed),
        }


def narrowed_figures(narrowed: Narrowed | None) -> dict[str, Any] | None:
    """The summary's ``cost.narrowed``: where the reservations first held a model's
    requests in flight below its ``max_concurrency`` (None: they never did)."""
    if narrowed is None:
        return None
    return {
        "model": narrowed.alias,
        "in_flight": narrowed.in_flight,
        "max_concurrency": narrowed.max_concurrency,
        "worst_case_usd": narrowed.worst_case_usd,
        "left_usd": narrowed.left_usd,
        "message": narrowed.text(),
    }
