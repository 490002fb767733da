"""Find generators through the ``genwire.generators`` entry-point group (built-ins too).

A config's generators are resolved by name: only the entry points it names are imported
(an entry point is named as its generator), so a command pays for the generators it uses,
and a plugin it does not name, broken or slow to import, is never imported. A broken
plugin is never dropped silently: each problem a loaded entry point has names the entry
point and why, and ``genwire plugins`` loads them all.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import BaseModel, ValidationError

from genwire.errors import PluginError, exception_text
from genwire.generators.base import Generator
from genwire.generators.metadata import GeneratorMetadata

GROUP = "genwire.generators"


class Origin:
    """Where a generator came from, put into words only when a message or a listing reads
    it: naming an entry point's distribution parses that distribution's metadata file."""

    def __init__(self, ep: EntryPoint | None = None, text: str = "") -> None:
        self.ep = ep
        self.text = text

    def __str__(self) -> str:
        if self.ep is None:
            return self.text
        dist = getattr(self.ep, "dist", None)
        where = f" from {dist.name}" if dist is not None else ""
        return f"entry point {self.ep.name!r} ({self.ep.value}{where})"


@dataclass
class Discovered:
    generators: dict[str, type[Generator[Any]]] = field(default_factory=dict)
    sources: dict[str, Origin] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def origins(self) -> dict[str, str]:
        """Name -> "entry point X (value from dist Y)" or "class 'X'"."""
        return {name: str(origin) for name, origin in self.sources.items()}

    def raise_for_problems(self) -> None:
        if self.problems:
            raise PluginError(self.problems)


def check_generator_class(obj: object, origin: str | Origin) -> str | None:
    """Why ``obj`` is not a usable generator class, or None if it is."""
    if not (inspect.isclass(obj) and issubclass(obj, Generator)):
        return f"{origin}: does not name a genwire Generator subclass (got {obj!r})"
    meta = obj.__dict__.get("metadata", getattr(obj, "metadata", None))
    if meta is None:
        return f"{origin}: {obj.__qualname__} has no metadata; set metadata = GeneratorMetadata(...)"
    if not isinstance(meta, GeneratorMetadata):
        return f"{origin}: {obj.__qualname__}.metadata must be a GeneratorMetadata, not {type(meta).__name__}"
    params_model = getattr(obj, "params_model", None)
    if not (inspect.isclass(params_model) and issubclass(params_model, BaseModel)):
        return f"{origin}: {obj.__qualname__}.params_model must be a pydantic BaseModel subclass"
    if obj.generate is Generator.generate or not inspect.iscoroutinefunction(obj.generate):
        return f"{origin}: {obj.__qualname__}.generate must be an async method (async def generate(self, rows))"
    return None


def _add(found: Discovered, cls: Any, origin: Origin) -> None:
    problem = check_generator_class(cls, origin)
    if problem:
        found.problems.append(problem)
        return
    name = cls.metadata.name
    if name in found.generators:
        found.problems.append(
            f"{origin}: generator name {name!r} is already provided by {found.sources[name]}; "
            "rename one of them (plugin names must not clash with built-ins or each other)"
        )
        return
    found.generators[name] = cls
    found.sources[name] = origin


def discover(extra: Iterable[type[Generator[Any]]] = (), names: Collection[str] | None = None) -> Discovered:
    """Generators from entry points, then ``extra`` classes given in Python.

    ``names``: the generators a config names; only the entry points of those names are
    imported. If one of them is neither such an entry point nor an ``extra`` class (a typo,
    or a plugin whose entry point is named apart from its generator), every entry point is
    imported, as with ``names=None``: the generator is found by its metadata's name, or the
    config's error lists every installed generator."""
    extra = list(extra)
    # Sorted so that which of two clashing plugins "wins" never depends on install order.
    points = sorted(entry_points(group=GROUP), key=lambda e: (e.value.startswith("genwire."), e.name), reverse=True)
    if names is not None:
        wanted = set(names) - {_declared_name(cls) for cls in extra}
        found = _load([ep for ep in points if ep.name in wanted], extra)
        if wanted <= found.generators.keys():
            return found
    return _load(points, extra)


def _declared_name(cls: object) -> str | None:
    meta = getattr(cls, "metadata", None)
    return meta.name if isinstance(meta, GeneratorMetadata) else None


def _load(points: Sequence[EntryPoint], extra: Sequence[type[Generator[Any]]]) -> Discovered:
    found = Discovered()
    for ep in points:
        origin = Origin(ep)
        try:
            cls = ep.load()
        except ValidationError as exc:  # GeneratorMetadata(...) rejected at class definition
            fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            hint = (
                " (a generator that needs nothing declares required_resources={})"
                if "required_resources" in fields
                else ""
            )
            found.problems.append(f"{origin}: invalid generator metadata: {fields}{hint}")
            continue
        except Exception as exc:  # a plugin's import may fail in any way; report it
            found.problems.append(f"{origin}: failed to import: {exception_text(exc)}")
            continue
        _add(found, cls, origin)
    for cls in extra:
        _add(found, cls, Origin(text=f"class {getattr(cls, '__qualname__', cls)!r}"))
    return found
