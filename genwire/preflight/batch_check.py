"""Batch mode's pre-flight checks (SPEC §14): per batching provider, a listing call to
its Files and to its Batches endpoint (nothing is uploaded). Probes stay online. Which
providers batch (``batch_providers``) is decided here, once, for ``run`` and for
``preflight`` alike: a CI gate on ``genwire preflight`` checks what the run will use."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from genwire.config.schema import OpenAIProviderConfig
from genwire.container.core import WiredPipeline
from genwire.errors import ErrorClass, ModelError, exception_text
from genwire.preflight.report import CheckResult, PreflightReport
from genwire.providers.batch.control import check_batch_api


def batch_providers(container: WiredPipeline, forced: bool) -> list[str]:
    """The ``openai`` providers of the models some column reaches that batch: all of
    them with ``forced`` (``--batch``), else those with ``batch.enabled``. The local
    provider never batches; an overridden model is an object of this process."""
    config = container.config
    used = {
        provider
        for t in container.plan().targets
        if t.name in config.models and container.cacheable(t.name)
        for provider in config.models[t.name].providers  # one, or every endpoint of a pool
    }
    return sorted(
        name
        for name in used
        if isinstance(config.providers[name], OpenAIProviderConfig) and (forced or config.providers[name].batch.enabled)  # type: ignore[union-attr]
    )


async def _check(container: WiredPipeline, provider: str) -> CheckResult:
    started = time.perf_counter()
    limit = container.config.preflight.timeout_s
    status, error_class, message = "ok", None, "Files and Batches endpoints answer (batch mode)"
    try:
        async with asyncio.timeout(limit):
            await check_batch_api(container.client(provider))
    except ModelError as exc:
        status, error_class = "failed", exc.error_class
        message = (
            f"batch mode needs the provider's Files and Batches API: {exc.message}; "
            f"run without --batch or set providers.{provider}.batch.enabled: false"
        )
    except TimeoutError:
        status, error_class = "failed", ErrorClass.TIMEOUT
        message = f"batch mode: the Files and Batches endpoints did not answer within {limit:g}s"
    except Exception as exc:  # any failure is a failed check, never a traceback
        status, error_class = "failed", ErrorClass.BAD_RESPONSE
        message = f"batch mode: {exception_text(exc)}"
    used_by = sorted(
        {
            column
            for t in container.plan().targets
            if t.name in container.config.models and provider in container.config.models[t.name].providers
            for column in t.used_by
        }
    )
    return CheckResult(
        target=provider,
        kind="batch_api",
        aliases=[provider],
        status=status,  # type: ignore[arg-type]
        error_class=error_class,
        message=message,
        latency_s=round(time.perf_counter() - started, 4),
        attempts=1,
        used_by=used_by,
    )


async def with_batch_checks(
    container: WiredPipeline, report: PreflightReport, providers: Sequence[str]
) -> PreflightReport:
    checks = await asyncio.gather(*(_check(container, name) for name in providers))
    every = [*report.checks, *checks]
    return PreflightReport(ok=all(c.status != "failed" for c in every), duration_s=report.duration_s, checks=every)
