"""What the static check of plugin code (``source_check``) reports: a ``Finding`` of some
``Severity``. Apart from the check itself, so that a booted pipeline and its plan can hold
findings without loading the checker (a config of built-in generators never runs it)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from genwire.errors import printable


class Severity(StrEnum):
    ERROR = "error"  # an undeclared literal use: a wiring error
    WARNING = "warning"  # a dynamic use, or a declared slot nothing uses
    NOTE = "note"  # the check could not read the source


class Finding(BaseModel):
    """One result of the check. ``line`` and ``col`` are 1-based; ``suggested_entry`` is
    the ``required_resources`` entry to add (``<KIND>`` when the use does not say)."""

    model_config = ConfigDict(frozen=True)

    severity: Severity
    generator: str
    file: str | None
    line: int | None
    col: int | None
    slot: str | None
    message: str
    suggested_entry: str | None = None

    @property
    def where(self) -> str:
        if self.file is None:
            return f"generator {self.generator!r}"
        parts = [printable(self.file), *(str(n) for n in (self.line, self.col) if n is not None)]
        return ":".join(parts)

    def text(self) -> str:
        """``file:line:col: generator 'x': message``: the line a user reads."""
        return f"{self.where}: generator {self.generator!r}: {self.message}"

    def __str__(self) -> str:
        return f"{self.severity.value}: {self.text()}"


__all__ = ["Finding", "Severity"]
