"""genwire: each generator wired with exactly the resources it declares, and every wired
model and dataset checked before generation starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from genwire.lazy import lazy_exports

if TYPE_CHECKING:
    from genwire.app import Container, boot
    from genwire.engine.run.conductor import RunResult
    from genwire.engine.run.options import RunOptions
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

from genwire.version import __version__

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

# Each public name -> the module that defines it. Imported on first use (PEP 562), so
# `import genwire` (and the command line's start-up) costs nothing until a name is used.
_WHERE = {
    "Container": "genwire.app",
    "boot": "genwire.app",
    "RunOptions": "genwire.engine.run.options",
    "RunResult": "genwire.engine.run.conductor",
    "CheckResult": "genwire.preflight.report",
    "PreflightError": "genwire.preflight.report",
    "PreflightReport": "genwire.preflight.report",
    "ModelUsage": "genwire.providers.usage",
    **dict.fromkeys(
        [
            "ConfigError",
            "DatasetError",
            "GenwireError",
            "ModelError",
            "PluginError",
            "RunError",
            "RunSetupError",
            "RunStopped",
            "UndeclaredResourceError",
            "WiringError",
        ],
        "genwire.errors",
    ),
}


__getattr__ = lazy_exports(globals(), _WHERE)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
