"""The pre-flight: every reachable model and dataset checked concurrently."""

from genwire.preflight.report import CheckResult, PreflightReport
from genwire.preflight.runner import run_preflight

__all__ = ["CheckResult", "PreflightReport", "run_preflight"]
