"""Batch-API mode in a run (SPEC §14): which providers batch, their collectors started
after the pre-flight with the run's journal, what the progress line says of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from genwire.config.schema import OpenAIProviderConfig
from genwire.container.core import WiredPipeline
from genwire.engine.batch_journal import BatchJournal
from genwire.providers.batch.collector import RoundSignal
from genwire.providers.batch.format import TERMINAL, BatchInfo

__all__ = ["BatchMode", "batch_providers"]


def batch_providers(container: WiredPipeline, forced: bool) -> list[str]:
    """The ``openai`` providers of the models some column reaches that batch: all of
    them with ``forced`` (``--batch``), else those with ``batch.enabled``. The local
    provider never batches; an overridden model is an object of this process."""
    config = container.config
    used = {
        provider
        for t in container.plan().targets
        for provider in (config.models[t.name].providers if t.name in config.models else ())
        if t.name in config.models and container.cacheable(t.name)
    }
    return sorted(
        name
        for name in used
        if isinstance(config.providers[name], OpenAIProviderConfig) and (forced or config.providers[name].batch.enabled)  # type: ignore[union-attr]
    )


class BatchMode:
    """The collectors of one run and its journal in the checkpoint directory."""

    def __init__(
        self, container: WiredPipeline, providers: Sequence[str], directory: Path, live_rows: Callable[[], int]
    ) -> None:
        self.container = container
        # The engine's live rows against the calls waiting in every collector: a round
        # goes when they are equal (every live row waits on a model).
        self.signal = RoundSignal(live_rows)
        self.providers = list(providers)
        self.directory = directory
        self.journal = BatchJournal(directory)
        self._clients: list[Any] = []
        self._final: list[BatchInfo] = []

    async def start(self) -> None:
        for name in self.providers:
            client = self.container.client(name)
            config = self.container.config.providers[name]
            assert isinstance(config, OpenAIProviderConfig)
            await client.start_batching(config.batch, self.journal, self.directory, self.signal)
            self._clients.append(client)

    async def stop(self) -> None:
        """The collectors stop waiting; submitted batches keep running at the provider."""
        self._final = self.infos()
        for client in self._clients:
            await client.stop_batching()
        self._clients = []
        self.journal.close()

    @property
    def holds_batches(self) -> bool:
        """The journal records batches not read to their end: the checkpoint must stay."""
        return self.journal.open_batches > 0

    def infos(self) -> list[BatchInfo]:
        """Every batch this session submitted or attached to (after ``stop``: as it was)."""
        if not self._clients:
            return list(self._final)
        return [info for client in self._clients if client.batcher is not None for info in client.batcher.batches()]

    def status(self) -> str:
        """``round 2, batch-000003 in_progress 10/40`` for the progress line."""
        rounds = max((c.batcher.round for c in self._clients if c.batcher is not None), default=0)
        open_ = [i for i in self.infos() if i.status not in TERMINAL]
        parts = [f"round {rounds}"] + [f"{i.id} {i.status} {i.completed}/{i.requests}" for i in open_[:3]]
        if len(open_) > 3:
            parts.append(f"+{len(open_) - 3} more batches")
        return ", ".join(parts)
