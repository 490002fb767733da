"""Structured output: the request field that asks for a JSON Schema, and checking a
reply against it (``jsonschema``). Shared by ``llm-structured`` and the pre-flight."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from referencing import Registry

MAX_ERROR_CHARS = 300  # of a validation message, in the errors file and the retry prompt


def response_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's structured-output request field (also what vLLM, NIM and llama.cpp take)."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def requested_schema(fmt: Any) -> dict[str, Any] | None:
    """The schema a ``response_format`` asks for, or None."""
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        spec = fmt.get("json_schema")
        if isinstance(spec, dict) and isinstance(spec.get("schema"), dict):
            schema: dict[str, Any] = spec["schema"]
            return schema
    return None


def local_registry() -> Registry[Any]:
    """A registry that retrieves nothing: a ``$ref`` resolves inside its schema (and the
    bundled meta-schemas), never over the network or from a file."""
    from referencing import Registry

    return Registry()  # its default retrieve raises NoSuchResource


def _where(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p!r}]" for p in path)


def _paths(value: Any, path: tuple[str | int, ...], into: dict[int, tuple[str | int, ...]]) -> None:
    """Where each mapping and list of a schema sits (by identity, for the messages)."""
    if isinstance(value, dict | list):
        into.setdefault(id(value), path)
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            _paths(item, (*path, key), into)


def checked_schema(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` when it is a valid JSON Schema whose ``$ref``s resolve; ValueError naming
    where it is not (a column's ``schema`` param, validated at load)."""
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(value)
    except jsonschema.exceptions.SchemaError as exc:
        where = "".join(f"[{p!r}]" for p in exc.absolute_path)
        raise ValueError(f"not a valid JSON Schema{' at ' + where if where else ''}: {exc.message}") from None
    problem = unresolvable_ref(value)
    if problem:
        raise ValueError(problem)
    return value


def unresolvable_ref(schema: dict[str, Any]) -> str | None:
    """Why a ``$ref`` (or ``$dynamicRef``) of ``schema`` cannot be resolved inside it, or
    None. The run validates replies with nothing but the schema, and the endpoint gets
    nothing else either, so a reference elsewhere (a URL, a file) or to a missing
    ``#/$defs/...`` would fail only later, as if the model had answered badly."""
    from referencing import Resource
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import DRAFT202012

    paths: dict[int, tuple[str | int, ...]] = {}
    _paths(schema, (), paths)
    root = Resource.from_contents(schema, default_specification=DRAFT202012)
    pending = [(root, local_registry().resolver_with_root(root))]
    while pending:  # the schema's subschemas as the specification defines them, $id scopes kept
        resource, resolver = pending.pop()
        contents = resource.contents
        if isinstance(contents, dict):  # else a boolean schema (or a shape check_schema refuses)
            resolver = resolver.in_subresource(resource)
            for key in ("$ref", "$dynamicRef"):
                ref = contents.get(key)
                if not isinstance(ref, str):
                    continue
                try:
                    resolver.lookup(ref)
                except Unresolvable:
                    where = _where((*paths.get(id(contents), ()), key))
                    return (
                        f"{where} = {ref!r} does not resolve inside the schema; genwire never fetches a "
                        "$ref (no network, no files) and the model gets only this schema: inline the "
                        "referenced schema under $defs and refer to it as '#/$defs/NAME'"
                    )
        pending.extend((sub, resolver) for sub in resource.subresources())
    return None


def schema_problem(instance: Any, schema: dict[str, Any]) -> str | None:
    """Why ``instance`` does not validate (the most relevant error, with its path), or None."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema, registry=local_registry())
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return None
    where = _where(tuple(error.absolute_path))
    return f"{where + ': ' if where else ''}{error.message}"[:MAX_ERROR_CHARS]


def parse_reply(text: str, schema: dict[str, Any]) -> tuple[Any, str | None]:
    """The reply's JSON value and why it is not acceptable (None when it is)."""
    body = text.strip()
    if body.startswith("```"):  # models fence JSON even when told not to
        body = body.strip("`").removeprefix("json").strip()
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, f"the reply is not JSON ({exc.msg} at character {exc.pos}): {text[:80]!r}"
    return value, schema_problem(value, schema)
