"""Generator metadata: the declaration that decides which resources a generator gets."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from genwire.config.schema import ModelKind


class ResourceKind(StrEnum):
    CHAT_MODEL = "chat_model"
    EMBEDDING_MODEL = "embedding_model"
    MODEL_REGISTRY = "model_registry"
    DATASET = "dataset"
    TOOLS = "tools"  # an MCP tool server (SPEC §18)


def model_resource_kind(kind: ModelKind) -> ResourceKind:
    """The resource kind of a model alias of config kind ``kind`` (defined once)."""
    return ResourceKind.CHAT_MODEL if kind == "chat" else ResourceKind.EMBEDDING_MODEL


def _not_reserved(slot: str) -> str:
    if slot.startswith("_"):
        raise ValueError(f"slot {slot!r}: names beginning with '_' are reserved for genwire; rename the slot")
    return slot


Slot = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]*$", max_length=64), AfterValidator(_not_reserved)]


class GeneratorMetadata(BaseModel):
    """What a generator is and what it needs. ``required_resources`` has no default on
    purpose: a generator that needs nothing says ``{}``. ``gate=True`` makes it a quality
    gate (SPEC §21)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$", max_length=64)]
    description: str
    required_resources: dict[Slot, ResourceKind]
    # A gate (SPEC §21): its value for a row is a verdict (True/False or ``Verdict``); a
    # rejected row stops there and goes to the rejected file; the column is not written.
    gate: bool = False
