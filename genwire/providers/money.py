"""Dollars as people read them: the one format every cost shown anywhere goes through
(the summary, the cost table, the estimate, the report page). Rounded for display only;
JSON figures are never rounded (SPEC §16). A small cost keeps its significant digits:
$0.000005 is not shown as $0.0000."""

from __future__ import annotations

import math

__all__ = ["price_hint", "usd"]


def usd(value: float | None) -> str:
    """``$1,234.5678`` from a cent up; below it, three significant digits (``$0.000027``,
    ``$0.00123``); ``$0`` for nothing and ``unknown`` without a price."""
    if value is None:
        return "unknown"
    if value == 0:
        return "$0"
    sign = "-" if value < 0 else ""
    size = abs(value)
    if size >= 0.01:
        return f"{sign}${size:,.4f}"
    decimals = 2 - math.floor(math.log10(size))  # three significant digits
    text = f"{size:.{decimals}f}".rstrip("0")
    return f"{sign}${text}"


def price_hint(aliases: list[str]) -> str:
    """Why a cost is unknown and how to know it (SPEC §16), for the models in ``aliases``."""
    return (
        f"no price for {', '.join(aliases)}: set models.<alias>.price "
        "({input_per_mtok, output_per_mtok}), or pricing: {source: FILE} (a LiteLLM price table)"
    )
