"""The DI container: boot, wiring, the plan, overrides."""

from __future__ import annotations

from typing import TYPE_CHECKING

from genwire.lazy import lazy_exports

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


__getattr__ = lazy_exports(globals(), _WHERE)
