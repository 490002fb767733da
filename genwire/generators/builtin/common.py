"""What the built-in generators share: the row-template environment, ``column`` /
``column.field`` references, seed derivation and vector normalisation. One definition
each; the built-ins import them from here."""

from __future__ import annotations

import hashlib
import re
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from jinja2 import StrictUndefined, Template, TemplateError, TemplateSyntaxError, meta, nodes
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import AfterValidator, BaseModel, ConfigDict, field_validator, model_validator

from genwire.generators.builtin.sandbox_limits import (
    bounded_binop,
    bounded_format_filter,
    bounded_width_filter,
    check_call,
    check_format,
)
from genwire.generators.outcome import RowFailure
from genwire.providers.vectors import Vectors

if TYPE_CHECKING:  # numpy is imported where vectors are handled: `genwire validate` never pays for it
    import numpy as np
    import numpy.typing as npt

# --- row templates ---------------------------------------------------------------------


class _RowEnvironment(ImmutableSandboxedEnvironment):
    """Sandboxed, strict, no HTML escaping (prompts are not HTML), and bounded: an operation
    that would build a value over the sandbox's limits fails (see sandbox_limits).

    ``{{ passage.items }}`` would normally return the dict's ``items`` method; rows are
    data, so for mappings a key of that name wins over a method."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        return bounded_binop(operator, left, right)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        check_call(__obj, args)
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        # checked where Jinja wraps it (on access), so that no way of calling it escapes
        owner = getattr(value, "__self__", None)
        if isinstance(owner, str) and getattr(value, "__name__", "") in ("format", "format_map"):
            check_format(owner)
        return super().wrap_str_format(value)

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, Mapping):
            try:
                return obj[attribute]
            except (KeyError, TypeError):
                pass
        return super().getattr(obj, attribute)


ENV = _RowEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
# lipsum() draws from the unseeded global random: a cell that differs on every run (and on
# resume) breaks the seeded-rows contract, so the name is left to be reported as unknown.
del ENV.globals["lipsum"]
ENV.filters["center"] = bounded_width_filter(ENV.filters["center"])
ENV.filters["indent"] = bounded_width_filter(ENV.filters["indent"])
ENV.filters["format"] = bounded_format_filter(ENV.filters["format"])


def render_over(template: Template, row: Mapping[str, Any]) -> str:
    """``template.render(row)`` without copying the row: Jinja's ``render`` copies its
    variables into a new dict twice, a cost that grows with the row's width, so a row of
    10,000 template columns spent most of its time there (quadratic in the columns). The
    row is read through a ``ChainMap`` in front of the globals (the row wins, as in
    ``render``), never written: a template cannot assign to its caller's variables."""
    context = template.new_context(ChainMap(row, template.globals), shared=True)  # type: ignore[arg-type]
    try:
        return template.environment.concat(template.root_render_func(context))
    except Exception:
        template.environment.handle_exception()  # raises, with the template's lines in the traceback (as render does)


def render_row(template: Template, name: str, row: dict[str, Any], column: str) -> str:
    try:
        return render_over(template, row)
    except TemplateError as exc:
        # StrictUndefined lands here: a missing field fails this row, loudly.
        raise ValueError(f"column {column!r}: {name} template: {exc}") from exc


def compile_template(source: str, name: str) -> Template:
    try:
        return ENV.from_string(source)
    except TemplateSyntaxError as exc:
        raise ValueError(f"{name} template: syntax error on line {exc.lineno}: {exc.message}") from None


# Parses with no globals, so every free name is listed, Jinja's own (``range``) included.
_FREE_NAMES = ImmutableSandboxedEnvironment()
_FREE_NAMES.globals.clear()


def template_variables(source: str) -> set[str]:
    """What a template reads from its row: ``col`` or, where it reads a field of a column,
    ``col.field`` (the pre-flight checks a seed dataset has that field).

    A Jinja global (``range``, ``namespace``, ``dict``...) is Jinja's only where it is
    called (``range(3)``). Anywhere else (``{{ namespace }}``), and ``self`` anywhere, the
    name is read as a column: no column can have it (the config refuses such names), so
    the wiring reports it like any unknown column instead of a cell holding
    ``<class 'jinja2.utils.Namespace'>``."""
    tree = _FREE_NAMES.parse(source)
    callees = {id(call.node) for call in tree.find_all(nodes.Call)}
    free = set(meta.find_undeclared_variables(tree))
    roots = free - set(ENV.globals)
    for name in tree.find_all(nodes.Name):
        assert isinstance(name, nodes.Name)  # find_all's type is too wide
        if name.ctx != "load" or id(name) in callees:
            continue
        if name.name in free or name.name == "self":  # Jinja binds ``self`` itself, unlisted
            roots.add(name.name)
    # ``person.get(...)`` calls a method of the column: it reads ``person``, not a field.
    fields: set[str] = set()
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        assert isinstance(node, nodes.Getattr | nodes.Getitem)  # find_all's type is too wide
        base = node.node
        if not (isinstance(base, nodes.Name) and base.name in roots) or id(node) in callees:
            continue
        if isinstance(node, nodes.Getattr):
            fields.add(f"{base.name}.{node.attr}")
        elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str) and "." not in node.arg.value:
            # A key holding a dot (``row['user.name']``) is one field, not a path: it
            # cannot be written as ``col.field`` and is left to the row's own check.
            fields.add(f"{base.name}.{node.arg.value}")
    with_fields = {f.split(".", 1)[0] for f in fields}
    return fields | (roots - with_fields)


class PromptParams(BaseModel):
    """``prompt`` and optional ``system`` are templates over the row; every other key is
    passed to the chat model as a parameter (``temperature``, ``max_tokens``, ...)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    prompt: str
    system: str | None = None

    @field_validator("prompt")
    @classmethod
    def _check_prompt(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("prompt must be a non-empty template")
        compile_template(value, "prompt")
        return value

    @field_validator("system")
    @classmethod
    def _check_system(cls, value: str | None) -> str | None:
        if value is not None:
            compile_template(value, "system")
        return value

    @model_validator(mode="after")
    def _check_extra(self) -> PromptParams:
        # Extra keys are model params, so a typo of a real field would otherwise be sent
        # to the model silently (and the template or setting it held ignored).
        if not self.model_params:
            return self
        import difflib  # here: most prompts set no model params (start-up)

        fields = [info.alias or name for name, info in type(self).model_fields.items()]
        for key in self.model_params:
            close = difflib.get_close_matches(key, fields, n=1, cutoff=0.75)
            if close:
                raise ValueError(f"unknown key {key!r}; did you mean {close[0]!r}?")
        return self

    @property
    def model_params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def reads(self) -> set[str]:
        """The columns (or ``column.field``) the prompt and system templates read."""
        names = template_variables(self.prompt)
        if self.system is not None:
            names |= template_variables(self.system)
        return names


class CompiledPrompt:
    """A column's prompt and system templates, compiled once, rendered per row."""

    def __init__(self, params: PromptParams, column: str) -> None:
        self.column = column
        self.prompt = compile_template(params.prompt, "prompt")
        self.system = compile_template(params.system, "system") if params.system is not None else None

    def render(self, row: dict[str, Any]) -> tuple[str, str | None]:
        prompt = render_row(self.prompt, "prompt", row, self.column)
        system = render_row(self.system, "system", row, self.column) if self.system is not None else None
        return prompt, system

    def render_many(self, rows: Sequence[dict[str, Any]]) -> list[tuple[str, str | None] | Exception]:
        """``render`` of each row, or the exception it raised (that row fails alone): a
        batch in one loop (a cached rerun renders every row and asks for none)."""
        prompt, system = self.prompt, self.system
        out: list[tuple[str, str | None] | Exception] = []
        for row in rows:
            try:
                out.append((render_over(prompt, row), None if system is None else render_over(system, row)))
            except Exception:
                try:  # again through render, for its error naming the column and the template
                    out.append(self.render(row))
                except Exception as exc:
                    out.append(exc)
        return out


# --- column references -----------------------------------------------------------------


# Column names follow the config's column-name rule; fields after the first dot are dataset
# keys, which may be anything except empty or containing a dot.
_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[^.]+)*$")


def _check_ref(value: str) -> str:
    if not _REF.match(value):
        raise ValueError(f"expected a column name or 'column.field', got {value!r}")
    return value


ColumnRef = Annotated[str, AfterValidator(_check_ref)]
"""A validated ``column`` or ``column.field`` (``column.a.b`` for nested mappings)."""


def ref_root(ref: str) -> str:
    """The column a reference reads (``passage.text`` → ``passage``)."""
    return ref.split(".", 1)[0]


def resolve_ref(row: Mapping[str, Any], ref: str) -> Any:
    """The value ``ref`` points at in ``row``; ValueError naming the missing part."""
    value: Any = row
    walked: list[str] = []
    for part in ref.split("."):
        if not isinstance(value, Mapping):
            raise ValueError(
                f"{'.'.join(walked)!r} is a {type(value).__name__}, not a mapping, so {ref!r} cannot be read"
            )
        if part not in value:
            where = f"{'.'.join(walked)!r}" if walked else "the row"
            raise ValueError(f"{where} has no {part!r} (reading {ref!r})")
        value = value[part]
        walked.append(part)
    return value


def text_at(row: Mapping[str, Any], ref: str) -> str:
    """The non-blank string at ``ref``; ValueError otherwise (blank text cannot be embedded)."""
    value = resolve_ref(row, ref)
    if not isinstance(value, str):
        raise ValueError(f"{ref!r} is a {type(value).__name__}, not a string")
    if not value.strip():
        raise ValueError(f"{ref!r} is empty")
    return value


def texts_of(rows: list[dict[str, Any]], ref: str) -> tuple[list[Any], list[int], list[str]]:
    """The rows' texts at ``ref`` to embed: (one slot per row, a ``RowFailure`` where a row
    has no text; the positions of the rows that have one; their texts)."""
    out: list[Any] = [None] * len(rows)
    positions: list[int] = []
    texts: list[str] = []
    for i, row in enumerate(rows):
        try:
            texts.append(text_at(row, ref))
        except ValueError as exc:
            out[i] = RowFailure(exc)
        else:
            positions.append(i)
    return out, positions, texts


def checked_vectors(vectors: Any, expected: int) -> list[list[float]]:
    """Plain float lists, after checking the model returned one vector per text."""
    if not isinstance(vectors, list) or len(vectors) != expected:
        got = len(vectors) if isinstance(vectors, list) else type(vectors).__name__
        raise ValueError(f"embedding model returned {got} vectors for {expected} texts")
    if type(vectors) is Vectors:  # a provider's checked answer: float lists already
        return vectors
    # Lists of floats are kept as they are: copying each number in Python cost keep-novel
    # ~2 s a 10,000 candidates (a profile of scale_rows).
    return [
        vector if type(vector) is list and set(map(type, vector)) <= _FLOATS else [float(x) for x in vector]
        for vector in vectors
    ]


_FLOATS = frozenset({float})


# --- seeds and vectors -----------------------------------------------------------------


def derive_seed(seed: int, column: str, *parts: object) -> int:
    """A stable 64-bit seed from the run seed, the column name and any extra parts.

    A cryptographic digest rather than ``hash()`` (randomised per process) or plain
    arithmetic (``random.Random`` drops the sign of int seeds, so -1 and 1 would collide).
    """
    key = "\x1f".join([str(seed), column, *(str(p) for p in parts)])
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def row_seeds(seed: int, column: str, indices: Sequence[int]) -> list[int]:
    """``derive_seed(seed, column, i)`` for each of ``indices``: the part every row shares
    hashed once (a sampler column seeds one generator per row)."""
    shared = hashlib.blake2b(f"{seed}\x1f{column}\x1f".encode(), digest_size=8)
    seeds = []
    for index in indices:
        digest = shared.copy()
        digest.update(str(index).encode())
        seeds.append(int.from_bytes(digest.digest(), "big"))
    return seeds


def finite_unit_rows(vectors: list[list[float]]) -> npt.NDArray[np.float64]:
    """The vectors as a matrix of unit-length rows; all-zero rows stay zero (similar to
    nothing). ValueError for NaN/inf, checked before scaling would hide them."""
    import numpy as np

    if type(vectors) is Vectors:  # checked finite, one length, by the provider
        m = vectors.matrix
    else:
        lengths = {len(v) for v in vectors}
        if len(lengths) != 1 or 0 in lengths:
            raise ValueError("embedding model returned empty vectors or vectors of different lengths")
        m = np.array(vectors, dtype=np.float64)
        if not np.isfinite(m).all():
            raise ValueError("embedding contains non-finite values (NaN/inf)")
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    out: npt.NDArray[np.float64] = np.divide(m, norms, out=np.zeros_like(m), where=norms > 0)
    return out
