"""genwire: each generator wired with exactly the resources it declares, and every wired
model and dataset checked before generation starts."""

from genwire.app import Container, boot
from genwire.engine.options import RunOptions
from genwire.engine.run import RunResult
from genwire.errors import (
    ConfigError,
    DatasetError,
    GenwireError,
    ModelError,
    PluginError,
    RunError,
    RunSetupError,
    RunStopped,
    UndeclaredResourceError,
    WiringError,
)
from genwire.preflight.report import CheckResult, PreflightError, PreflightReport
from genwire.providers.usage import ModelUsage

__version__ = "0.1.0"

__all__ = [
    "CheckResult",
    "ConfigError",
    "Container",
    "DatasetError",
    "GenwireError",
    "ModelError",
    "ModelUsage",
    "PluginError",
    "PreflightError",
    "PreflightReport",
    "RunError",
    "RunOptions",
    "RunResult",
    "RunSetupError",
    "RunStopped",
    "UndeclaredResourceError",
    "WiringError",
    "__version__",
    "boot",
]
