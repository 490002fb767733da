"""The DI container: boot, wiring, the plan, overrides."""

from genwire.container.boot import boot_container, load_source
from genwire.container.core import WiredContainer
from genwire.container.plan import ColumnPlan, SlotPlan, TargetPlan, WiringPlan

__all__ = ["ColumnPlan", "SlotPlan", "TargetPlan", "WiredContainer", "WiringPlan", "boot_container", "load_source"]
