"""The pre-flight: every reachable model and dataset checked concurrently."""

from __future__ import annotations

from typing import TYPE_CHECKING

from genwire.lazy import lazy_exports

if TYPE_CHECKING:
    from genwire.preflight.report import CheckResult, PreflightReport
    from genwire.preflight.runner import run_preflight

__all__ = ["CheckResult", "PreflightReport", "run_preflight"]

# Public name -> its module, imported on first use (PEP 562): importing one submodule of
# the package does not load the others.
_WHERE = {
    **dict.fromkeys(["CheckResult", "PreflightReport"], "genwire.preflight.report"),
    **dict.fromkeys(["run_preflight"], "genwire.preflight.runner"),
}


__getattr__ = lazy_exports(globals(), _WHERE)
