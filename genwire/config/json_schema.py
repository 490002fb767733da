"""The JSON Schema of genwire.yaml (``genwire schema``), made from the pydantic models of
``config.schema`` with the descriptions of ``config.descriptions``: editors complete and
check a file as it is typed (the YAML language server reads the ``# yaml-language-server:
$schema=`` line ``genwire init`` writes).

The schema checks shapes: keys, types, enums, ranges and patterns. ``genwire validate``
checks those too and more (a binding to a model that does not exist, a template reading a
later column, a base URL the HTTP client cannot parse). Built only when asked: loading a
config never imports this module."""

from __future__ import annotations

import copy
from typing import Any

DRAFT = "https://json-schema.org/draft/2020-12/schema"
ROOT = "GenwireConfig"
# genwire substitutes ${VAR} and ${VAR:-default} in any scalar before validating, so a
# value holding one is accepted wherever a scalar goes (timeout_s: ${TIMEOUT}).
SUBSTITUTED = "Substituted"
_SUBSTITUTED_DEF = {
    "type": "string",
    "pattern": r"\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}",
    "description": "${VAR} or ${VAR:-default}: replaced by the environment variable's value when the file is loaded.",
}
_SCALARS = {"string", "integer", "number", "boolean"}
_KEEP_OUTSIDE = ("description", "default")


def config_schema() -> dict[str, Any]:
    """The JSON Schema of genwire.yaml, with a description on every key."""
    from genwire.config.descriptions import DESCRIPTIONS
    from genwire.config.schema import GenwireConfig

    raw = GenwireConfig.model_json_schema()
    defs: dict[str, Any] = raw.pop("$defs", {})
    schema: dict[str, Any] = {"$schema": DRAFT, "title": "genwire.yaml", **raw}
    for name, definition in [(ROOT, schema), *defs.items()]:
        _describe(definition, DESCRIPTIONS.get(name, {}))
        _factory_defaults(name, definition)
    for node in _walk([schema, *defs.values()]):
        _names_as_property_names(node)
    for definition in [schema, *defs.values()]:
        for key, prop in definition.get("properties", {}).items():
            if key != "kind":  # the discriminator of a union: its value picks the model
                _allow_substitution(prop)
    defs[SUBSTITUTED] = dict(_SUBSTITUTED_DEF)
    schema["$defs"] = dict(sorted(defs.items()))
    return schema


def schema_text() -> str:
    """The schema as ``genwire schema`` prints it and ``genwire init`` ships it."""
    import json

    return json.dumps(config_schema(), indent=2, ensure_ascii=False) + "\n"


def missing_descriptions() -> list[str]:
    """``Model.field`` of every key without a description, and every entry of the table
    that names no key (a renamed or removed field)."""
    from genwire.config.descriptions import DESCRIPTIONS
    from genwire.config.schema import GenwireConfig

    raw = GenwireConfig.model_json_schema()
    models = {ROOT: raw, **raw.get("$defs", {})}
    missing = []
    for name, definition in models.items():
        table = DESCRIPTIONS.get(name, {})
        for key in ["", *definition.get("properties", {})]:
            if not table.get(key) and not (key == "" and definition.get("description")):
                missing.append(f"{name}.{key}" if key else f"{name} (the model itself)")
        missing += [f"{name}.{key} (no such field)" for key in table if key and key not in definition["properties"]]
    missing += [f"{name} (no such model)" for name in DESCRIPTIONS if name not in models]
    return missing


def _describe(definition: dict[str, Any], table: dict[str, str]) -> None:
    definition.pop("title", None)
    if table.get(""):
        definition["description"] = table[""]
    for key, prop in definition.get("properties", {}).items():
        prop.pop("title", None)  # "Timeout S": the key itself says it better
        if table.get(key):
            prop["description"] = table[key]


def _factory_defaults(name: str, definition: dict[str, Any]) -> None:
    """pydantic leaves out the default of a field made by a factory (``headers: {}``,
    ``retry_on: [429, ...]``); an editor shows it. A section's default is its own keys'."""
    from pydantic import BaseModel

    from genwire.config import schema as models

    model = getattr(models, name, None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return
    for key, field in model.model_fields.items():
        prop = definition.get("properties", {}).get(key)
        if prop is None or "default" in prop or field.default_factory is None:
            continue
        value = field.get_default(call_default_factory=True, validated_data={})
        if isinstance(value, dict | list) and not isinstance(value, BaseModel):
            prop["default"] = value


def _allow_substitution(node: dict[str, Any]) -> None:
    """Let a scalar (or the scalars inside a list or mapping) be written as ``${VAR}``."""
    reference = {"$ref": f"#/$defs/{SUBSTITUTED}"}
    if "anyOf" in node:
        options = node["anyOf"]
        for option in options:
            if option.get("type") in ("array", "object"):
                _allow_substitution(option)
        if any(option.get("type") in _SCALARS for option in options) and reference not in options:
            options.append(reference)
    elif node.get("type") in _SCALARS and "const" not in node:
        inner = {k: v for k, v in node.items() if k not in _KEEP_OUTSIDE}
        outer = {k: v for k, v in node.items() if k in _KEEP_OUTSIDE}
        node.clear()
        node.update(outer, anyOf=[inner, reference])
    elif node.get("type") == "array" and isinstance(node.get("items"), dict):
        _allow_substitution(node["items"])
    elif node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        _allow_substitution(node["additionalProperties"])


def _walk(nodes: list[Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found.append(node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _names_as_property_names(node: dict[str, Any]) -> None:
    """pydantic writes a mapping whose keys are constrained names as ``patternProperties``,
    which lets a key that does not match through unchecked; as ``propertyNames`` plus
    ``additionalProperties`` every key is checked and every value completed."""
    patterns = node.get("patternProperties")
    if not isinstance(patterns, dict) or len(patterns) != 1 or "additionalProperties" in node:
        return
    ((pattern, values),) = patterns.items()
    del node["patternProperties"]
    node["propertyNames"] = {**node.get("propertyNames", {}), "pattern": pattern}
    node["additionalProperties"] = copy.deepcopy(values) if values else True
