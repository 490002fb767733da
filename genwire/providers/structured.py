"""Structured output: the request field that asks for a JSON Schema, and checking a
reply against it (``jsonschema``). Shared by ``llm-structured`` and the pre-flight."""

from __future__ import annotations

import json
from typing import Any

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


def schema_problem(instance: Any, schema: dict[str, Any]) -> str | None:
    """Why ``instance`` does not validate (the most relevant error, with its path), or None."""
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(instance))
    if error is None:
        return None
    where = "".join(f"[{p!r}]" for p in error.absolute_path)
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
