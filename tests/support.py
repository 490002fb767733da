"""Helpers several test modules share."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from genwire.generators import Generator, GeneratorMetadata, ResourceKind


class RegistryParams(BaseModel):
    use: str


class RegistryUser(Generator[RegistryParams]):
    """Test generator: calls the alias named in params through its registry (no request
    shape can be known for such a use)."""

    metadata = GeneratorMetadata(
        name="registry-user", description="uses a registry", required_resources={"models": ResourceKind.MODEL_REGISTRY}
    )
    params_model = RegistryParams

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        model = self.resources.models.get(self.params.use)
        return [await model.complete("hi") for _ in rows]


class StopAfter:
    """A progress hook that stops the run after ``batches`` batches: an exception
    mid-run, as any crash would be."""

    class Stop(Exception):
        pass

    def __init__(self, batches: int) -> None:
        self.batches = batches

    def start(self, total: int, done: int = 0) -> None:
        pass

    def advance(self, done: int, failed: int, status: str = "") -> None:
        self.batches -= 1
        if self.batches <= 0:
            raise StopAfter.Stop

    def stop(self) -> None:
        pass
