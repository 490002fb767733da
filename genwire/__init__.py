"""genwire: each generator wired with exactly the resources it declares, and every wired
model and dataset checked before generation starts."""

from genwire.app import Container, boot
from genwire.errors import (
    ConfigError,
    DatasetError,
    GenwireError,
    ModelError,
    PluginError,
    PreflightError,
    RunError,
    UndeclaredResourceError,
    WiringError,
)
from genwire.preflight.report import CheckResult, PreflightReport

__version__ = "0.1.0"

__all__ = [
    "CheckResult",
    "ConfigError",
    "Container",
    "DatasetError",
    "GenwireError",
    "ModelError",
    "PluginError",
    "PreflightError",
    "PreflightReport",
    "RunError",
    "UndeclaredResourceError",
    "WiringError",
    "__version__",
    "boot",
]
