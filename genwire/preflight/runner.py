"""Run every check concurrently: bounded, timed, deduplicated by endpoint, all failures kept.

This is the single pre-flight code path: ``container.preflight()``, ``genwire preflight``
and ``run`` all come through ``run_preflight``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from genwire.container.core import WiredContainer
from genwire.container.plan import TargetPlan
from genwire.errors import ErrorClass, GenwireError, ModelError
from genwire.generators.metadata import ResourceKind
from genwire.preflight.probes import ProbeFailure, check_dimensions, probe_chat, probe_dataset, probe_embedding
from genwire.preflight.report import CheckResult, PreflightReport
from genwire.providers.base import Attempts, attempt_log


@dataclass
class _Group:
    """Targets that share one endpoint: probed once, judged per alias."""

    kind: ResourceKind
    resource: Any
    targets: list[TargetPlan] = field(default_factory=list)


@dataclass
class _Outcome:
    value: Any = None
    failure: tuple[str, str] | None = None  # (error class, message)
    latency_s: float = 0.0
    attempts: int = 0


def _result(
    target: TargetPlan,
    aliases: list[str],
    status: str,
    error_class: str | None,
    message: str,
    latency_s: float = 0.0,
    attempts: int = 0,
) -> CheckResult:
    return CheckResult(
        target=target.name,
        kind=target.kind.value,
        aliases=aliases,
        status=status,  # type: ignore[arg-type]
        error_class=error_class,
        message=message,
        latency_s=round(latency_s, 4),
        attempts=attempts,
        used_by=list(target.used_by),
    )


class _Preflight:
    def __init__(self, container: WiredContainer) -> None:
        self.container = container
        self.settings = container.config.preflight
        self.models = container.config.models
        self.semaphore = asyncio.Semaphore(self.settings.concurrency)
        self.deadline = 0.0

    def group(self, targets: list[TargetPlan], results: dict[str, CheckResult]) -> list[_Group]:
        groups: dict[Hashable, _Group] = {}
        for t in targets:
            if not t.health_check:
                results[t.name] = _result(t, [t.name], "skipped", None, "health_check: false in its model config")
                continue
            try:
                resource = self.container.resource(t.name)
            except GenwireError as exc:
                results[t.name] = _result(t, [t.name], "failed", ErrorClass.BAD_RESPONSE.value, str(exc))
                continue
            key = (t.kind, self.container.endpoint_identity(t.name))
            groups.setdefault(key, _Group(t.kind, resource)).targets.append(t)
        return list(groups.values())

    async def probe(self, group: _Group) -> _Outcome:
        outcome = _Outcome()
        attempts = Attempts()
        attempt_log.set(attempts)  # this task's own context: counts only its requests
        started = time.perf_counter()
        try:
            async with asyncio.timeout_at(self.deadline):
                async with self.semaphore:
                    started = time.perf_counter()
                    async with asyncio.timeout(self.settings.timeout_s):
                        outcome.value = await self.run_probe(group)
        except TimeoutError:
            waited = time.perf_counter() - started
            limits = f"timeout_s {self.settings.timeout_s:g}, stage deadline {self.settings.deadline_s:g}s"
            if attempts.rate_limited is not None:  # it was waiting out a 429, not a silent server
                outcome.failure = (
                    ErrorClass.RATE_LIMITED.value,
                    f"still rate-limited after {waited:.1f}s ({limits}): {attempts.rate_limited}",
                )
            else:
                outcome.failure = (ErrorClass.TIMEOUT.value, f"no answer within {waited:.1f}s ({limits})")
        except ModelError as exc:
            outcome.failure = (exc.error_class.value, exc.message)
        except ProbeFailure as exc:
            outcome.failure = (exc.error_class.value, exc.message)
        except GenwireError as exc:
            outcome.failure = (ErrorClass.BAD_RESPONSE.value, str(exc))
        except Exception as exc:  # a fake or plugin-provided model may fail in any way
            outcome.failure = (ErrorClass.BAD_RESPONSE.value, f"{type(exc).__name__}: {exc}")
        outcome.latency_s = time.perf_counter() - started
        outcome.attempts = max(attempts.count, 1)
        return outcome

    async def run_probe(self, group: _Group) -> Any:
        if group.kind is ResourceKind.CHAT_MODEL:
            max_tokens = max(self.models[t.name].probe_max_tokens for t in group.targets)
            return await probe_chat(group.resource, max_tokens)
        if group.kind is ResourceKind.EMBEDDING_MODEL:
            return await probe_embedding(group.resource)
        needed = sorted({c for t in group.targets for c in t.dataset_columns})
        return await probe_dataset(group.resource, needed)

    def judge(self, group: _Group, outcome: _Outcome, results: dict[str, CheckResult]) -> None:
        aliases = [t.name for t in group.targets]
        for t in group.targets:
            status, error_class, message = "ok", None, ""
            if outcome.failure is not None:
                status, (error_class, message) = "failed", outcome.failure
            elif group.kind is ResourceKind.EMBEDDING_MODEL:
                expected = self.models[t.name].dimensions or getattr(group.resource, "dimensions", None)
                try:
                    message = check_dimensions(outcome.value, expected)
                except ProbeFailure as exc:
                    status, error_class, message = "failed", exc.error_class.value, exc.message
            else:
                message = str(outcome.value)
            results[t.name] = _result(t, aliases, status, error_class, message, outcome.latency_s, outcome.attempts)

    async def run(self) -> PreflightReport:
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        self.deadline = loop.time() + self.settings.deadline_s
        plan = self.container.plan()
        results: dict[str, CheckResult] = {}
        groups = self.group(plan.targets, results)
        outcomes = await asyncio.gather(*(self.probe(g) for g in groups))
        for group, outcome in zip(groups, outcomes, strict=True):
            self.judge(group, outcome, results)
        checks = [results[t.name] for t in plan.targets]
        return PreflightReport(
            ok=all(c.status != "failed" for c in checks),
            duration_s=round(time.perf_counter() - started, 4),
            checks=checks,
        )


async def run_preflight(container: WiredContainer) -> PreflightReport:
    """Check every target some wired generator can reach. Never raises for an unhealthy
    target: each gets a result, and ``report.ok`` says whether all passed."""
    return await _Preflight(container).run()
