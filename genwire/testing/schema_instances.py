"""Small values that validate against a JSON Schema: what the fake server answers a
structured request or a tool call with (shared by ``fake_server`` and ``fake_tool_calls``)."""

from __future__ import annotations

from typing import Any

__all__ = ["schema_instance"]


def schema_instance(schema: Any, root: Any = None) -> Any:
    """A small value that validates against ``schema`` (the JSON Schema subset models are
    given: types, properties, required, items, enum, const, minimum, minItems, and local
    ``$ref``s such as ``#/$defs/name``, followed in ``root``, the whole schema)."""
    root = schema if root is None else root
    if not isinstance(schema, dict):
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        target = root
        for part in filter(None, ref[1:].split("/")):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        return schema_instance(target, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: schema_instance(sub, root) for name, sub in props.items()}
    if kind == "array":
        return [schema_instance(schema.get("items", {}), root) for _ in range(schema.get("minItems", 1))]
    if kind == "string":
        return "x" * max(1, schema.get("minLength", 1))
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1.0))
    if kind == "boolean":
        return True
    return None
