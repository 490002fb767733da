"""The public container: the wired graph plus its two stages, pre-flight and run."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from genwire.container.boot import Source, boot_container
from genwire.container.core import WiredPipeline
from genwire.engine.run.conductor import RunResult, run_pipeline
from genwire.engine.run.options import RunOptions
from genwire.engine.run.sink import Progress
from genwire.generators.base import Generator
from genwire.preflight.report import PreflightReport
from genwire.preflight.runner import run_preflight


class Container(WiredPipeline):
    """What ``genwire.boot`` returns: ``plan``, ``override``, ``preflight``, ``run``, ``aclose``."""

    async def preflight(
        self, *, use_cache: bool = True, cache_dir: Path | None = None, batch: bool = False
    ) -> PreflightReport:
        """Check every model and dataset a wired generator can reach, with the requests
        the run will send; never raises for an unhealthy target. ``use_cache=False``
        ignores the probe cache (``preflight.cache_ttl_s``). Providers with
        ``batch.enabled`` (every ``openai`` provider with ``batch=True``, as
        ``run(batch=True)``) also get their Files and Batches endpoints checked."""
        from genwire.preflight.batch_check import batch_providers

        providers = batch_providers(self, forced=batch)
        return await run_preflight(self, use_cache=use_cache, cache_dir=cache_dir, batch_providers=providers)

    async def run(
        self,
        options: RunOptions | int | None = None,
        *,
        progress: Progress | None = None,
        on_preflight: Callable[[PreflightReport], None] | None = None,
        **keywords: Any,
    ) -> RunResult:
        """Pre-flight (unless skipped), then generate, checkpointing every batch, and
        write the dataset atomically.

        ``options`` is a ``RunOptions`` (a bare int is ``num_records``); its fields may
        also be given as keywords (``run(output=..., batch=True)``; the older names
        ``use_cache`` and ``cache_dir`` mean ``probe_cache`` and ``probe_cache_dir``).
        ``resume`` (the default) continues a checkpoint of the same configuration beside
        the output. ``on_preflight`` receives the report before the run starts (or
        stops). Raises ``PreflightError`` (with the report) if the pre-flight fails,
        ``RunStopped`` above ``max_failure_rate`` (rows kept), ``RunSetupError`` when the
        run cannot start as asked.
        """
        if isinstance(options, int) and not isinstance(options, bool):
            options = RunOptions.of(None, num_records=options, **keywords)
        elif options is None or isinstance(options, RunOptions):
            options = RunOptions.of(options, **keywords) if keywords or options is None else options
        else:
            raise TypeError(f"run() takes RunOptions or a number of records, not {type(options).__name__}")
        return await run_pipeline(self, options, progress=progress, on_preflight=on_preflight)


def boot(
    source: Source,
    *,
    generators: Iterable[type[Generator[Any]]] = (),
    env: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
) -> Container:
    """Parse and validate the config, discover plugins, and wire every column.

    ``source`` is a path to genwire.yaml or a dict of the same shape. ``generators`` adds
    generator classes without an entry point (handy in tests). No network is touched.
    """
    return boot_container(source, Container, generators=generators, env=env, base_dir=base_dir)
