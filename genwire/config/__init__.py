"""Configuration: the genwire.yaml schema and its loader."""

from __future__ import annotations

from typing import TYPE_CHECKING

from genwire.lazy import lazy_exports

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


__getattr__ = lazy_exports(globals(), _WHERE)
