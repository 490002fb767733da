"""The pre-flight of a Data Designer setup (SPEC §13): the aliases that
``genwire.config.data_designer`` translated are checked by ``run_preflight`` itself (same
probes, concurrency, classification, probe cache), and the report names them as Data
Designer does.

The translated config has one stand-in column whose registry slot reaches every probed
alias: the pre-flight checks what columns reach, and genwire does not run Data
Designer's columns (which columns name which alias is reported as ``used_by``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genwire.config.data_designer import GENERATOR, DataDesignerSetup, Unprobed
from genwire.container.boot import boot_container
from genwire.container.core import WiredPipeline
from genwire.errors import GenwireError
from genwire.generators.base import Generator, NoParams
from genwire.generators.metadata import GeneratorMetadata, ResourceKind, model_resource_kind
from genwire.preflight.report import CheckKind, CheckResult, PreflightReport
from genwire.preflight.runner import run_preflight


class DataDesignerColumns(Generator[NoParams]):
    """Stands for a Data Designer pipeline's columns: reaches the models they name, so
    the pre-flight checks them; generates nothing."""

    metadata = GeneratorMetadata(
        name=GENERATOR,
        description="Data Designer's columns, checked by the pre-flight only (genwire does not run them)",
        required_resources={"models": ResourceKind.MODEL_REGISTRY},
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        raise GenwireError("genwire does not run Data Designer columns; move the pipeline to a genwire.yaml first")


def _kind(unprobed: Unprobed) -> CheckKind:
    return "image_model" if unprobed.kind == "image" else model_resource_kind(unprobed.kind)


def _unprobed_result(item: Unprobed, used_by: list[str]) -> CheckResult:
    return CheckResult(
        target=item.alias,
        kind=_kind(item),
        aliases=[item.alias],
        status=item.status,
        error_class=item.error_class,
        message=item.message,
        latency_s=0.0,
        attempts=0,
        used_by=used_by,
    )


def _renamed(check: CheckResult, setup: DataDesignerSetup) -> CheckResult:
    """A check of a translated model, named by its Data Designer alias."""
    alias = setup.names[check.target]
    return check.model_copy(
        update={"target": alias, "aliases": [setup.names[a] for a in check.aliases], "used_by": setup.used_by[alias]}
    )


async def preflight_data_designer(
    setup: DataDesignerSetup, *, use_cache: bool = True, cache_dir: Path | None = None
) -> PreflightReport:
    """Check every alias of ``setup`` (from ``load_data_designer``) concurrently. Never
    raises for an unhealthy alias: each gets a result, in the order of the files."""
    checks: list[CheckResult] = []
    duration = 0.0
    if setup.loaded is not None:
        container = boot_container(setup.loaded, WiredPipeline, generators=[DataDesignerColumns])
        async with container:
            report = await run_preflight(container, use_cache=use_cache, cache_dir=cache_dir)
        checks = [_renamed(c, setup) for c in report.checks]
        duration = report.duration_s
    checks += [_unprobed_result(u, setup.used_by[u.alias]) for u in setup.unprobed]
    order = {alias: i for i, alias in enumerate(setup.aliases)}
    checks.sort(key=lambda c: order[c.target])
    return PreflightReport(ok=all(c.status != "failed" for c in checks), duration_s=duration, checks=checks)
