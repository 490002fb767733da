"""The pre-flight report: one result per target, stable as JSON."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from genwire.errors import ErrorClass, GenwireError
from genwire.generators.metadata import ResourceKind

Status = Literal["ok", "failed", "skipped"]
# What a check is of: a resource kind, a model kind genwire reports but never probes
# (a Data Designer image model), or a provider's Files and Batches API (batch mode).
CheckKind = ResourceKind | Literal["image_model", "batch_api"]


class CheckResult(BaseModel):
    target: str
    kind: CheckKind
    aliases: list[str]
    status: Status
    error_class: ErrorClass | None
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


class PreflightError(GenwireError):
    """Raised by ``run`` when the pre-flight fails. ``report`` holds every check."""

    def __init__(self, report: PreflightReport) -> None:
        self.report = report
        failed = [c for c in report.checks if c.status == "failed"]
        lines = [f"  {c.label} ({c.kind}): {c.error_class} — {c.message}" for c in failed]
        super().__init__(
            f"pre-flight failed: {len(failed)} of {len(report.checks)} checks failed; "
            "no generation was started.\n" + "\n".join(lines)
        )
