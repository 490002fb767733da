"""The DI container: boot, wiring, the plan, overrides."""

from genwire.container.boot import boot_container, load_source
from genwire.container.core import WiredPipeline
from genwire.container.plan import ColumnPlan, SlotPlan, TargetPlan, WiringPlan

__all__ = ["ColumnPlan", "SlotPlan", "TargetPlan", "WiredPipeline", "WiringPlan", "boot_container", "load_source"]
