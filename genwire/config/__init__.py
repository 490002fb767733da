"""Configuration: the genwire.yaml schema and its loader."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from genwire.config.loader import LoadedConfig, load_config, load_config_text, validate_data
    from genwire.config.schema import (
        ColumnConfig,
        DatasetConfig,
        DocumentsDatasetConfig,
        FileDatasetConfig,
        GenwireConfig,
        LocalProviderConfig,
        ModelConfig,
        OpenAIProviderConfig,
        PipelineConfig,
        PreflightConfig,
        ProviderConfig,
    )

__all__ = [
    "ColumnConfig",
    "DatasetConfig",
    "DocumentsDatasetConfig",
    "FileDatasetConfig",
    "GenwireConfig",
    "LoadedConfig",
    "LocalProviderConfig",
    "ModelConfig",
    "OpenAIProviderConfig",
    "PipelineConfig",
    "PreflightConfig",
    "ProviderConfig",
    "load_config",
    "load_config_text",
    "validate_data",
]

# Public name -> its module, imported on first use (PEP 562): importing one submodule of
# the package does not load the others.
_WHERE = {
    **dict.fromkeys(["LoadedConfig", "load_config", "load_config_text", "validate_data"], "genwire.config.loader"),
    **dict.fromkeys(
        [
            "ColumnConfig",
            "DatasetConfig",
            "DocumentsDatasetConfig",
            "FileDatasetConfig",
            "GenwireConfig",
            "LocalProviderConfig",
            "ModelConfig",
            "OpenAIProviderConfig",
            "PipelineConfig",
            "PreflightConfig",
            "ProviderConfig",
        ],
        "genwire.config.schema",
    ),
}


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(where), name)
    globals()[name] = value
    return value
