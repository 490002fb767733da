"""What each model's tokens cost (SPEC §16): ``models.<alias>.price`` first, else the
``pricing: {source: FILE}`` table (LiteLLM's ``model_prices_and_context_window.json``
format). A model found in neither has no price: its cost is unknown, never 0. Every
``Price`` says where it came from, and every cost figure carries that source.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genwire.config.schema import GenwireConfig, ModelConfig
from genwire.errors import ConfigError

__all__ = ["Price", "PriceTable", "load_price_table", "model_output_limits", "model_prices"]

PER_MTOK = 1_000_000


@dataclass(frozen=True)
class Price:
    """USD per token, online and through batches; ``source`` names where it was read."""

    input_per_token: float
    output_per_token: float
    batch_input_per_token: float
    batch_output_per_token: float
    source: str

    def cost(self, input_tokens: int, output_tokens: int, *, batched: bool = False) -> float:
        if batched:
            return input_tokens * self.batch_input_per_token + output_tokens * self.batch_output_per_token
        return input_tokens * self.input_per_token + output_tokens * self.output_per_token


PriceTable = Mapping[str, Mapping[str, Any]]


def load_price_table(path: Path) -> PriceTable:
    """A LiteLLM-format price table; a file that cannot be used is a ``ConfigError``
    naming it and saying what was found."""
    where = f"pricing.source {str(path)!r}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([f"{where}: cannot read it ({exc.strerror or exc})"]) from None
    except ValueError as exc:
        raise ConfigError(
            [f"{where}: not JSON ({exc}); use LiteLLM's model_prices_and_context_window.json format"]
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            [f"{where}: expected an object of model name -> prices (LiteLLM's format), got {type(data).__name__}"]
        )
    return {name: entry for name, entry in data.items() if isinstance(entry, dict)}


def _per_token(entry: Mapping[str, Any], key: str, where: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise ConfigError([f"{where}.{key}: got {value!r}; a price is a non-negative number (USD per token)"])
    return float(value)


def _from_table(table: PriceTable, model: str, table_name: str) -> Price | None:
    """The table's entry for ``model``: its exact name, else without a ``provider/`` prefix."""
    candidates = [model] + ([model.split("/", 1)[1]] if "/" in model else [])
    for name in candidates:
        entry = table.get(name)
        if entry is None:
            continue
        where = f"{table_name}[{name!r}]"
        input_cost = _per_token(entry, "input_cost_per_token", where)
        if input_cost is None:
            continue  # an entry without an input price (images, audio): not a token price
        output_cost = _per_token(entry, "output_cost_per_token", where) or 0.0
        batch_in = _per_token(entry, "input_cost_per_token_batches", where)
        batch_out = _per_token(entry, "output_cost_per_token_batches", where)
        return Price(
            input_cost,
            output_cost,
            input_cost if batch_in is None else batch_in,
            output_cost if batch_out is None else batch_out,
            f"{table_name} ({name})",
        )
    return None


def _declared(alias: str, model: ModelConfig) -> Price | None:
    price = model.price
    if price is None:
        return None
    inp, out = price.input_per_mtok / PER_MTOK, price.output_per_mtok / PER_MTOK
    return Price(inp, out, inp * price.batch_discount, out * price.batch_discount, f"models.{alias}.price")


def model_prices(
    config: GenwireConfig, table: PriceTable | None, table_name: str = "pricing"
) -> dict[str, Price | None]:
    """Every model alias's price (None: unknown)."""
    prices: dict[str, Price | None] = {}
    for alias, model in config.models.items():
        price = _declared(alias, model)
        if price is None and table is not None:
            price = _from_table(table, model.model, table_name)
        prices[alias] = price
    return prices


def _table_entry(table: PriceTable, model: str) -> tuple[str, Mapping[str, Any]] | None:
    for name in [model] + ([model.split("/", 1)[1]] if "/" in model else []):
        entry = table.get(name)
        if entry is not None:
            return name, entry
    return None


def model_output_limits(config: GenwireConfig, table: PriceTable | None, table_name: str = "pricing") -> dict[str, int]:
    """Each chat model's output limit, for the budget's worst case when a request sets no
    ``max_tokens``: ``models.<alias>.max_output_tokens``, else the table's
    ``max_output_tokens`` (LiteLLM's key); a model in neither is left out (the budget's
    conservative default applies)."""
    limits: dict[str, int] = {}
    for alias, model in config.models.items():
        if model.max_output_tokens is not None:
            limits[alias] = model.max_output_tokens
            continue
        found = _table_entry(table, model.model) if table is not None else None
        if found is None:
            continue
        name, entry = found
        value = entry.get("max_output_tokens")
        if value is None:
            continue
        if type(value) is not int or value <= 0:
            raise ConfigError(
                [f"{table_name}[{name!r}].max_output_tokens: got {value!r}; an output limit is a positive whole number"]
            )
        limits[alias] = value
    return limits


