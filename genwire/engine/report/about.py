"""What a session line records about the run for its dataset card (SPEC §24), beside the
columns and models it already names: the seed, each model's provider kind, the wiring
graph, and the pipeline file as written (``${VAR}`` references kept; any secret value
written literally masked by the one scrubber)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, SecretStr

from genwire.engine.report.finished import fingerprint_digest
from genwire.engine.report.wiring import wiring_graph
from genwire.scrub import scrub

if TYPE_CHECKING:
    from genwire.container.core import WiredPipeline

PIPELINE_CHARS = 64_000  # the card shows the file; a generated monster is cut


def config_secrets(value: Any) -> Iterator[str]:
    """Every secret value a validated config holds (API keys, header values, tool env)."""
    if isinstance(value, SecretStr):
        yield value.get_secret_value()
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from config_secrets(getattr(value, name))
    elif isinstance(value, dict):
        for item in value.values():
            yield from config_secrets(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from config_secrets(item)


def pipeline_text(container: WiredPipeline) -> dict[str, str]:
    """The pipeline file's path and text as written (a config given as data has none)."""
    loaded = container.loaded
    path = Path(loaded.source)
    text = ""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
    if not text:
        return {"path": loaded.source, "text": ""}
    clean = scrub(text, config_secrets(container.config))
    if len(clean) > PIPELINE_CHARS:
        clean = clean[:PIPELINE_CHARS] + "\n# … (cut)\n"
    return {"path": path.name, "text": clean}


def run_about(container: WiredPipeline) -> dict[str, Any]:
    """The session line's fields for the card."""
    config = container.config
    kinds = {
        alias: str(getattr(config.providers.get(model.providers[0]), "kind", ""))
        for alias, model in config.models.items()
    }
    card = config.pipeline.card
    return {
        "seed": config.pipeline.seed,
        "kinds": kinds,
        "wiring": wiring_graph(container.plan()).as_dict(),
        "pipeline": pipeline_text(container),
        "card": card.model_dump(mode="json", exclude_none=True) if card is not None else {},
    }


@dataclass
class RunAbout:
    """How the data was made, for the dataset card (SPEC §24): the latest session's
    seed, provider kinds, wiring, pipeline file and ``pipeline.card``; the model ids the
    servers named (any session's, the latest kept); the checkpoint's fingerprint as one
    digest; the tokens paid per column (the ledger's)."""

    seed: int | None = None
    kinds: dict[str, str] = field(default_factory=dict)
    wiring: dict[str, Any] | None = None
    pipeline: dict[str, str] = field(default_factory=dict)  # path, text (scrubbed, ${VAR} as written)
    card: dict[str, Any] = field(default_factory=dict)
    reported: dict[str, str] = field(default_factory=dict)
    fingerprint: str = ""
    column_tokens: dict[str, int] = field(default_factory=dict)

    def read_session(self, record: dict[str, Any]) -> None:
        if type(record.get("seed")) is int:
            self.seed = record["seed"]
        for name in ("kinds", "pipeline", "card"):
            if isinstance(record.get(name), dict):
                setattr(self, name, {str(k): v for k, v in record[name].items()})
        if isinstance(record.get("wiring"), dict):
            self.wiring = record["wiring"]

    def read_end(self, record: dict[str, Any]) -> None:
        if isinstance(record.get("reported"), dict):
            self.reported.update({str(a): str(m) for a, m in record["reported"].items()})


def short_fingerprint(fingerprint: Any) -> str:
    """The run's fingerprint (every key path's hash, SPEC §9) as one short digest: the start
    of the finished mark's (``finished.fingerprint_digest``), "" when there is none."""
    return fingerprint_digest(fingerprint)[:16] if isinstance(fingerprint, dict) else ""
