"""The DI container: boot, wiring, the plan, overrides."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from genwire.container.boot import boot_container, load_source
    from genwire.container.core import WiredPipeline
    from genwire.container.plan import ColumnPlan, SlotPlan, TargetPlan, WiringPlan

__all__ = ["ColumnPlan", "SlotPlan", "TargetPlan", "WiredPipeline", "WiringPlan", "boot_container", "load_source"]

# Public name -> its module, imported on first use (PEP 562): importing one submodule of
# the package does not load the others.
_WHERE = {
    **dict.fromkeys(["boot_container", "load_source"], "genwire.container.boot"),
    **dict.fromkeys(["WiredPipeline"], "genwire.container.core"),
    **dict.fromkeys(["ColumnPlan", "SlotPlan", "TargetPlan", "WiringPlan"], "genwire.container.plan"),
}


def __getattr__(name: str) -> object:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(where), name)
    globals()[name] = value
    return value
