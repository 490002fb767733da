"""The pre-flight report: one result per target, stable as JSON."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

Status = Literal["ok", "failed", "skipped"]


class CheckResult(BaseModel):
    target: str
    kind: str
    aliases: list[str]
    status: Status
    error_class: str | None
    message: str
    latency_s: float
    attempts: int
    used_by: list[str]
    # None: the plain probe; else the column whose request shape (system, params,
    # response_format) this check probed. The target stays the alias.
    variant: str | None = None
    cached: bool = False  # an ok result from the probe cache: nothing was sent
    age_s: float | None = None  # how old the cached result is

    @property
    def label(self) -> str:
        return self.target if self.variant is None else f"{self.target} (for column {self.variant})"


class PreflightReport(BaseModel):
    ok: bool
    duration_s: float
    checks: list[CheckResult]

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "failed"]

    def check(self, target: str, variant: str | None = None) -> CheckResult:
        """The plain check of ``target``, or its check for column ``variant``'s requests."""
        for c in self.checks:
            if c.target == target and c.variant == variant:
                return c
        raise KeyError(target if variant is None else f"{target} (for column {variant})")
