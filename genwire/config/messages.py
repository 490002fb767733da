"""pydantic's validation errors as sentences a user can act on: what was written, and what
to write instead (SPEC §2). Never the value of a secret."""

from __future__ import annotations

import re
from typing import Any

from pydantic_core import ErrorDetails

from genwire.config.strict import Substituted
from genwire.scrub import without_userinfo

# Values under these keys may be credentials: never quoted back (header values included).
SECRET_KEYS = frozenset({"api_key", "headers", "extra_headers"})
MAX_SHOWN = 80  # characters of a given value quoted back in a message

_PATTERN_HINTS = {
    "name": "a name starts with a letter or '_' and holds only letters, digits, '_' and '-'",
    "url": "write an http:// or https:// URL, e.g. https://integrate.api.nvidia.com/v1",
}

_URL_KEYS = ("base_url", "endpoint")  # genwire's, and Data Designer's (model_providers.yaml)

_TYPE_WORDS = {  # container types read better in words ("expected a mapping, got a list")
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
}


def shown(value: Any) -> str:
    """A value as the user wrote it, in words for containers, cut to MAX_SHOWN."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    # A URL's password goes before the cut: a cut inside it would leave no '@' to find.
    text = without_userinfo(repr(value))
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…'"


def user_path(err: ErrorDetails, path: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Where the user should look: a wrong tag is at the tag's key (``providers.x.kind``)."""
    if err["type"] == "union_tag_invalid":
        return (*path, str((err.get("ctx") or {}).get("discriminator", "kind")).strip("'"))
    return path


NOT_WRITTEN: Any = object()  # describe()'s ``written`` when the file holds no value at the path


def describe(err: ErrorDetails, path: tuple[str | int, ...], written: Any = NOT_WRITTEN) -> str:
    """One sentence for one pydantic error at ``path``; ``written`` is the value the file
    holds there, shown rather than pydantic's input (which may be converted: 1e22 taken as
    an integer) where it is a plain scalar."""
    kind = err["type"]
    secret = any(part in SECRET_KEYS for part in path)
    plain = written is not NOT_WRITTEN and not isinstance(written, dict | list | Substituted)
    given = "" if secret or "input" not in err else shown(written if plain else err["input"])
    got = f"got {given}" if given else ""
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        return f"unknown key {path[-1]!r}" if path else "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_invalid":
        return f"got {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    if kind == "union_tag_not_found":
        return f"required key {str(ctx.get('discriminator', 'kind')).strip(chr(39))!r} is missing"
    if kind in ("literal_error", "enum"):
        return f"{got}; expected {ctx.get('expected', 'one of the allowed values')}"
    if kind == "string_pattern_mismatch":
        hint = _PATTERN_HINTS["url"] if path and path[-1] in _URL_KEYS else _PATTERN_HINTS["name"]
        return f"{got}; {hint}"
    if kind in _TYPE_WORDS:
        return f"expected {_TYPE_WORDS[kind]}, {got}" if got else f"expected {_TYPE_WORDS[kind]}"
    if kind in ("value_error", "assertion_error"):
        message = str(ctx.get("error", err["msg"]))
        scalar = not isinstance(err.get("input"), dict | list)
        quoted = "'" in message  # the message already quotes what was given
        return f"{message} ({got})" if scalar and given and not quoted else message
    # e.g. "Input should be a valid integer" (pydantic's ", unable to parse string as an
    # integer" only repeats it once the given value is shown)
    message = (err["msg"] or kind).split(", unable to parse")[0]
    unquoted = _unquoted(kind, err.get("input")) if not secret else None
    if unquoted is not None:  # "2" for a number, "false" for a boolean: values are taken as written
        return f"{message}, {got} (in quotes it is text: write {unquoted} without quotes)"
    return f"{message}, {got}" if got else message


_BOOLEANS = frozenset({"true", "false", "True", "False", "TRUE", "FALSE"})


def _unquoted(kind: str, value: Any) -> str | None:
    """What a quoted scalar should have been written as, when it spells the type wanted."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if kind == "bool_type" and text in _BOOLEANS:
        return text
    if kind == "int_type" and re.fullmatch(r"[-+]?[0-9]+", text):
        return text
    if kind == "float_type" and re.fullmatch(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", text):
        return text
    return None
