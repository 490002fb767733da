"""Values are taken as written, as the JSON Schema (``genwire schema``) says: a number is a
number and a boolean a boolean, not a quoted ``"2"`` or ``"false"`` (pydantic's lax mode
would coerce those, so ``validate`` accepted what an editor flagged).

The one exception is a scalar made by ``${VAR}`` substitution: its text stands for the
value it spells (``timeout_s: ${TIMEOUT}`` with ``TIMEOUT=30``), exactly where the schema
admits a ``${VAR}``. The loader hands such a scalar over as ``Substituted``, which carries
both its text and that value; each model picks the one its field takes.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, SecretStr, model_validator
from pydantic.fields import FieldInfo

__all__ = ["STRICT", "StrictValues", "Substituted"]

# defer_build: validators are built on first use, so start-up pays only for what a config uses.
STRICT = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


class Substituted(str):
    """The text of a scalar after ``${VAR}`` substitution; ``scalar`` is what that text
    spells by YAML's rules (``"30"``: 30, ``"true"``: True), for a field that is not text."""

    scalar: Any

    def __new__(cls, text: str, scalar: Any) -> Substituted:
        made = super().__new__(cls, text)
        made.scalar = scalar
        return made

    def __reduce__(self) -> tuple[type[str], tuple[str]]:
        return str, (str(self),)  # pickled (a Ray worker's config) as the plain text


def _takes_text(annotation: Any) -> bool:
    """Whether a field of this type accepts a string (then a substituted value stays text)."""
    if annotation in (str, SecretStr, Any) or (isinstance(annotation, type) and issubclass(annotation, str)):
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _takes_text(get_args(annotation)[0])
    if origin is Literal:
        return any(isinstance(a, str) for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        return any(_takes_text(a) for a in get_args(annotation))
    return False


def _integer_only(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin is Annotated:
        return _integer_only(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        return bool(options) and all(_integer_only(a) for a in options)
    return annotation is int


def _item_type(annotation: Any) -> Any:
    """The element type of a ``list[...]`` field (through Annotated / Optional), else None."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _item_type(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        found = [t for t in map(_item_type, get_args(annotation)) if t is not None]
        return found[0] if found else None
    if origin is list:
        return get_args(annotation)[0]
    return None


def _as_field_takes(value: Any, annotation: Any) -> Any:
    if isinstance(value, Substituted):
        return str(value) if _takes_text(annotation) else value.scalar
    if isinstance(value, float) and value.is_integer() and _integer_only(annotation):
        return int(value)  # 64.0 is an integer to JSON Schema too
    if isinstance(value, list):
        item = _item_type(annotation)
        if item is not None:
            return [_as_field_takes(v, item) for v in value]
    return value


class StrictValues(BaseModel):
    """A config section whose values are taken as written (see the module docstring)."""

    model_config = STRICT

    @model_validator(mode="before")
    @classmethod
    def _as_written(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields: dict[str, FieldInfo] = cls.model_fields
        return {
            key: _as_field_takes(value, fields[key].annotation) if key in fields else value
            for key, value in data.items()
        }
