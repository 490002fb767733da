"""The run's budget (SPEC §16), by role: ``meter`` (``CostMeter``: every paid request's
worst case reserved before it is sent, settled from its answer; ``metered_batch_call`` for
batch mode) and ``figures`` (what it counts with: per-model stats, holds, what was paid).
The names this was known by as one module are exported here.
"""

from genwire.providers.budget.figures import (
    DEFAULT_OUTPUT_LIMIT,
    MEASURED_REQUESTS,
    Hold,
    Learned,
    ModelStats,
    Narrowed,
    Paid,
    answers_asked,
    max_tokens_of,
    p95,
)
from genwire.providers.budget.meter import CostMeter, metered_batch_call

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "MEASURED_REQUESTS",
    "CostMeter",
    "Hold",
    "Learned",
    "ModelStats",
    "Narrowed",
    "Paid",
    "answers_asked",
    "max_tokens_of",
    "metered_batch_call",
    "p95",
]
