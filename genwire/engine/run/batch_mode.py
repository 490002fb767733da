"""Batch-API mode in a run (SPEC §14): which providers batch, their collectors started
after the pre-flight with the run's journal, what the progress line says of them."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from genwire.config.schema import OpenAIProviderConfig
from genwire.container.core import WiredPipeline
from genwire.engine.records.batch_journal import BatchJournal
from genwire.preflight.batch_check import batch_providers
from genwire.providers.batch.collector import RoundSignal
from genwire.providers.batch.format import TERMINAL, BatchInfo

__all__ = ["BatchMode", "batch_providers"]


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
        """Each provider's collector, once it found again what the journal lost."""
        for name in self.providers:
            client = self.container.client(name)
            config = self.container.config.providers[name]
            assert isinstance(config, OpenAIProviderConfig)
            await client.start_batching(config.batch, self.journal, self.directory, self.signal)
            self._clients.append(client)
        self.journal.searched_everywhere()  # every batching provider looked for its lost batches
        self.journal.rewrite_if_recovered()

    def raise_if_broken(self) -> None:
        """A collector that broke (a file it cannot write, a bug) stops the run with its
        one message, even where a plugin caught the error its calls got."""
        for client in self._clients:
            if client.batcher is not None and client.batcher.failure is not None:
                raise client.batcher.failure

    async def still_open(self) -> list[str]:
        """The batches the journal names that are still open at the provider (asked):
        while there are any, the journal stays beside the output."""
        from genwire.errors import ModelError
        from genwire.providers.batch.control import control_request

        still: list[str] = []
        for provider, batch_id in self.journal.open_batch_ids():
            if provider not in self.container.config.providers:
                still.append(batch_id)
                continue
            try:
                client = self.container.client(provider)
                state = json.loads(await control_request(client, "GET", f"/batches/{batch_id}"))
            except (ModelError, ValueError):
                still.append(batch_id)  # unknown is open: the journal is the truth about what was paid
                continue
            if not isinstance(state, dict) or state.get("status") not in TERMINAL:
                still.append(batch_id)
        return still

    async def stop(self) -> None:
        """The collectors stop waiting; submitted batches keep running at the provider."""
        self._final = self.infos()
        for client in self._clients:
            await client.stop_batching()
        self._clients = []
        self.journal.close()

    @property
    def holds_batches(self) -> bool:
        """The journal names batches (a rerun collects what they answered instead of
        paying again, open or not): a run that stops keeps its checkpoint."""
        return self.journal.names_batches

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
