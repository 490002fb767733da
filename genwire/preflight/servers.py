"""The pre-flight's first stage (SPEC §23): start the managed servers some wired model
reaches, concurrently, each reported as a check with its start time; the targets served
by a server that did not start are skipped (one failure, not one per model)."""

from __future__ import annotations

from collections.abc import Callable

from genwire.container.core import WiredPipeline
from genwire.preflight.report import CheckResult, PreflightReport


async def start_servers(
    container: WiredPipeline, on_check: Callable[[CheckResult], None] | None = None
) -> tuple[list[CheckResult], dict[str, str]]:
    """Each reachable server's start as a check; and per target served by a server that
    failed, why it is skipped."""
    fleet = container.servers
    reachable = container.reachable_servers()
    if fleet is None or not reachable:
        return [], {}
    checks = []
    failed: dict[str, str] = {}
    for start in await fleet.start(reachable):
        check = CheckResult(
            target=start.name,
            kind="server",
            aliases=[start.name],
            status="ok" if start.error_class is None else "failed",
            error_class=start.error_class,
            message=start.message,
            latency_s=round(start.seconds, 4),
            attempts=1,
            used_by=reachable[start.name],
            endpoint=None if start.label == start.name else start.label,
        )
        checks.append(check)
        if on_check is not None:
            on_check(check)
        if start.error_class is not None:
            failed.setdefault(start.name, f"not probed: server {start.label!r} did not start ({start.error_class})")
    blocked = {}
    for alias, model in container.config.models.items():
        for provider in model.providers:
            server = getattr(container.config.providers[provider], "server", None)
            if server in failed:
                blocked[alias] = failed[server]
    return checks, blocked


def with_server_checks(report: PreflightReport, checks: list[CheckResult]) -> PreflightReport:
    """The report with the servers' checks first."""
    if not checks:
        return report
    ok = report.ok and all(c.status != "failed" for c in checks)
    # The servers started concurrently, before the probes: the stage took that much longer.
    duration = round(report.duration_s + max(c.latency_s for c in checks), 4)
    return report.model_copy(update={"ok": ok, "duration_s": duration, "checks": [*checks, *report.checks]})
