"""Configuration: the genwire.yaml schema and its loader."""

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
