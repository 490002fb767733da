"""Small values that validate against a JSON Schema: what the fake server answers a
structured request or a tool call with (shared by ``answering`` and ``tool_calls``)."""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["schema_instance"]


def _pick(seed: str, path: str, count: int) -> int:
    """A number in ``range(count)`` of its own for each seed and place in the value."""
    digest = hashlib.blake2b(f"{seed}\x1f{path}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def schema_instance(schema: Any, root: Any = None, *, seed: str | None = None, path: str = "$") -> Any:
    """A small value that validates against ``schema`` (the JSON Schema subset models are
    given: types, properties, required, items, enum, const, minimum, minItems, and local
    ``$ref``s such as ``#/$defs/name``, followed in ``root``, the whole schema). With a
    ``seed`` (the prompt, say), bounded integers and enums vary with it: a fake judge gives
    each prompt a score of its own between ``minimum`` and ``maximum``."""
    root = schema if root is None else root
    if not isinstance(schema, dict):
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        target = root
        for part in filter(None, ref[1:].split("/")):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        return schema_instance(target, root, seed=seed, path=path)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][_pick(seed, path, len(schema["enum"])) if seed is not None else 0]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: schema_instance(sub, root, seed=seed, path=f"{path}.{name}") for name, sub in props.items()}
    if kind == "array":
        items = schema.get("items", {})
        return [schema_instance(items, root, seed=seed, path=f"{path}[{i}]") for i in range(schema.get("minItems", 1))]
    if kind == "string":
        return "x" * max(1, schema.get("minLength", 1))
    if kind == "integer":
        low = int(schema.get("minimum", 1))
        high = schema.get("maximum")
        if seed is not None and isinstance(high, int | float) and high >= low:
            return low + _pick(seed, path, int(high) - low + 1)
        return low
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    return None
