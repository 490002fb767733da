"""A model registry restricted to the aliases a column bound: the only models it holds."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any


class ModelRegistryView:
    """Serves exactly the bound aliases; it holds no reference to any other model."""

    __slots__ = ("_models",)

    def __init__(self, models: Mapping[str, Any]) -> None:
        self._models: Mapping[str, Any] = MappingProxyType(dict(models))

    @property
    def aliases(self) -> list[str]:
        return sorted(self._models)

    def get(self, alias: str) -> Any:
        try:
            return self._models[alias]
        except KeyError:
            bound = ", ".join(self.aliases) or "none"
            raise KeyError(
                f"model {alias!r} is not in this column's model registry (bound: {bound}); "
                "add it to the column's model_registry binding"
            ) from None

    def __contains__(self, alias: object) -> bool:
        return alias in self._models

    def __repr__(self) -> str:
        return f"ModelRegistryView(aliases={self.aliases})"
