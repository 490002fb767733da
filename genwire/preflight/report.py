"""The pre-flight report: one result per target, stable as JSON."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from genwire.errors import ErrorClass, GenwireError
from genwire.generators.metadata import ResourceKind

# degraded: an endpoint of a pool failed, but enough others passed (min_healthy).
Status = Literal["ok", "failed", "skipped", "degraded"]
# What a check is of: a resource kind, a model kind genwire reports but never probes
# (a Data Designer image model), a provider's Files and Batches API (batch mode), or a
# managed inference server (SPEC §23).
CheckKind = ResourceKind | Literal["image_model", "batch_api", "server"]


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
    endpoint: str | None = None  # a pool's endpoint this check probed; None: the alias's one endpoint

    @property
    def label(self) -> str:
        label = self.target if self.endpoint is None else f"{self.target} via {self.endpoint}"
        return label if self.variant is None else f"{label} (for column {self.variant})"


class PreflightReport(BaseModel):
    ok: bool
    duration_s: float
    checks: list[CheckResult]

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "failed"]

    @property
    def degraded(self) -> list[CheckResult]:
        """Pool endpoints that failed while enough of their pool passed (a warning)."""
        return [c for c in self.checks if c.status == "degraded"]

    def warning(self) -> str | None:
        """What the command line warns about when the pre-flight passed degraded."""
        if not self.degraded:
            return None
        names = ", ".join(c.label for c in self.degraded)
        return f"warning: pre-flight passed with degraded endpoint pools; failing endpoints: {names}"

    def endpoint_verdicts(self) -> dict[str, dict[str, str]]:
        """Per pooled alias, its endpoints that failed a check, with the error class
        (``EndpointPool.mark``'s input: the run starts with them cooled down or out)."""
        found: dict[str, dict[str, str]] = {}
        for c in self.checks:
            if c.endpoint is not None and c.status != "ok":
                verdicts = found.setdefault(c.target, {})
                error = str(c.error_class or ErrorClass.BAD_RESPONSE)
                if verdicts.get(c.endpoint) not in ("auth", "not_found"):  # the gravest wins
                    verdicts[c.endpoint] = error
        return found

    def check(self, target: str, variant: str | None = None, *, endpoint: str | None = None) -> CheckResult:
        """The plain check of ``target``, or its check for column ``variant``'s requests;
        ``endpoint``: that endpoint's check of a pooled alias."""
        for c in self.checks:
            if c.target == target and c.variant == variant and c.endpoint == endpoint:
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
