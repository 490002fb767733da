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


class PreflightReport(BaseModel):
    ok: bool
    duration_s: float
    checks: list[CheckResult]

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "failed"]

    def check(self, target: str) -> CheckResult:
        for c in self.checks:
            if c.target == target:
                return c
        raise KeyError(target)
