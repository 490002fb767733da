"""Per-model send capabilities: what a model handle holds instead of its provider.

A handle given to a plugin must lead nowhere but its own model (SPEC §3). It therefore
keeps no reference to its provider (which owns the HTTP session and the API key and
serves every alias): it holds an unguessable 128-bit token. The provider keeps the
``Route`` (provider, alias, model) alive, and only provider code resolves a token, with
the model id fixed inside the route, so a handle can only ever send for its own model.
"""

from __future__ import annotations

import secrets
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from genwire.config.schema import ModelConfig

P = TypeVar("P")


@dataclass(frozen=True, slots=True, weakref_slot=True)
class Route(Generic[P]):
    provider: P
    alias: str
    model: str
    # A member of an endpoint pool (SPEC §17): the pool's cache identity, shared by its
    # members; its requests fail over instead of retrying. None: a model of its own.
    pool: str | None = None


# Weak values: a route lives exactly as long as the provider that created it.
_ROUTES: weakref.WeakValueDictionary[int, Route[object]] = weakref.WeakValueDictionary()


def open_route(provider: P, alias: str, model: str, keep: list[Route[P]], pool: str | None = None) -> int:
    """Register a route and return its token; ``keep`` is the provider's list of routes."""
    route = Route(provider, alias, model, pool)
    keep.append(route)
    token = secrets.randbits(128)
    _ROUTES[token] = route  # type: ignore[assignment]  # Route is covariant in practice
    return token


def resolve_route(token: int, provider_type: type[P]) -> Route[P]:
    route = _ROUTES.get(token)
    if route is None or not isinstance(route.provider, provider_type):
        raise RuntimeError("this model handle's provider is closed or gone")
    return route  # type: ignore[return-value]  # checked just above


class TokenHandle:
    """The read-only part every HTTP model handle shares: alias, model, params and the
    route token (no provider, session or key is reachable from it)."""

    __slots__ = ("_params", "_token", "alias", "model")
    _params: Mapping[str, Any]
    _token: int
    alias: str
    model: str

    def __init__(self, token: int, alias: str, config: ModelConfig) -> None:
        object.__setattr__(self, "_token", token)
        object.__setattr__(self, "alias", alias)
        object.__setattr__(self, "model", config.model)
        object.__setattr__(self, "_params", MappingProxyType(dict(config.params)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    @property
    def params(self) -> Mapping[str, Any]:
        return self._params

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alias={self.alias!r}, model={self.model!r})"
