"""pydantic's validation errors as sentences a user can act on: what was written, and what
to write instead (SPEC §2). Never the value of a secret."""

from __future__ import annotations

import re
import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, RootModel
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


def describe(
    err: ErrorDetails, path: tuple[str | int, ...], written: Any = NOT_WRITTEN, known: Sequence[str] = ()
) -> str:
    """One sentence for one pydantic error at ``path``; ``written`` is the value the file
    holds there, shown rather than pydantic's input (which may be converted: 1e22 taken as
    an integer) where it is a plain scalar; ``known`` the keys allowed beside an unknown one."""
    kind = err["type"]
    secret = any(part in SECRET_KEYS for part in path)
    plain = written is not NOT_WRITTEN and not isinstance(written, dict | list | Substituted)
    given = "" if secret or "input" not in err else shown(written if plain else err["input"])
    got = f"got {given}" if given else ""
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        return f"unknown key {path[-1]!r}{did_you_mean(str(path[-1]), known)}" if path else "unknown key"
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


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known`` to a mistyped ``name``, or "".
    A dotted entry (``pipeline.num_records``: a key of a section inside) is offered only
    where no key of the section itself is close."""
    if not known:
        return ""
    import difflib  # here: a config without a typo never pays for it (start-up)

    for candidates in ([k for k in known if "." not in k], [k for k in known if "." in k]):
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in reversed(candidates)}
        close = difflib.get_close_matches(name, list(by_leaf), n=1)
        if close:
            return f" (did you mean {by_leaf[close[0]]!r}?)"
    return ""


def known_keys(model: Any, loc: Sequence[str | int]) -> list[str]:
    """The keys the section at ``loc`` (pydantic's location, union tags included) allows,
    as the user writes them (aliases), then those of the sections directly inside it,
    dotted (a key written one level too high); [] where ``loc`` leads to no section."""
    own: list[str] = []
    inside: list[str] = []
    for found in _types_at(model, tuple(loc)):
        for key, annotation in _fields(found):
            own.append(key)
            inside += [f"{key}.{sub}" for section in _types_at(annotation, ()) for sub, _ in _fields(section)]
    return own + inside


def _fields(tp: Any) -> list[tuple[str, Any]]:
    """A section's keys as written, with their types; [] for anything but a section."""
    if not (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return []
    return [(info.alias or name, info.annotation) for name, info in tp.model_fields.items()]


def _types_at(tp: Any, loc: tuple[str | int, ...]) -> list[Any]:
    """The types a value at ``loc`` inside a value of type ``tp`` may have."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _types_at(get_args(tp)[0], loc)
    if origin is Union or origin is types.UnionType:
        members = [m for m in get_args(tp) if m is not type(None)]
        tagged = [m for m in members if loc and loc[0] in _union_tags(m)]
        if tagged:  # pydantic puts the member's tag (or name) into the location
            return _types_at(tagged[0], loc[1:])
        return [t for m in members for t in _types_at(m, loc)]
    if isinstance(tp, type) and issubclass(tp, RootModel):  # its value is its root's
        return _types_at(tp.model_fields["root"].annotation, loc)
    if not loc:
        return [tp]
    part, rest = loc[0], loc[1:]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        for name, info in tp.model_fields.items():
            if part in (name, info.alias):
                return _types_at(info.annotation, rest)
        return []
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return _types_at(get_args(tp)[-1], rest)
    if isinstance(origin, type) and issubclass(origin, Sequence) and isinstance(part, int):
        return _types_at(get_args(tp)[0], rest)
    return []


def _union_tags(member: Any) -> set[Any]:
    """What pydantic may name a union member by in a location: its tags, or its name."""
    tags: set[Any] = {getattr(member, "__name__", None)}
    if isinstance(member, type) and issubclass(member, BaseModel):
        for info in member.model_fields.values():
            if get_origin(info.annotation) is Literal:
                tags.update(get_args(info.annotation))
    return tags


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
