"""A gate's verdict on one row (SPEC §21): keep it or not, and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a gate returns for a row (``True``/``False`` say the same without a reason)."""

    keep: bool
    reason: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.keep, bool):
            raise TypeError(f"Verdict.keep must be True or False, got {self.keep!r}")
        if not isinstance(self.reason, str):
            raise TypeError(f"Verdict.reason must be a string, got {type(self.reason).__name__}")


def as_verdict(value: Any) -> Verdict | None:
    """``value`` as a ``Verdict``; None when it is not one (a gate's bug)."""
    if isinstance(value, Verdict):
        return value
    if isinstance(value, bool):
        return Verdict(value, "" if value else "rejected")
    return None
