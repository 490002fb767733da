"""``llm-text``: renders a Jinja2 prompt over each row and asks the chat model for text."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError, TemplateSyntaxError, meta, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from genwire.generators.base import Generator
from genwire.generators.metadata import GeneratorMetadata, ResourceKind
from genwire.generators.outcome import RowFailure, gather_rows
from genwire.generators.resources import Resources


class _RowEnvironment(ImmutableSandboxedEnvironment):
    """Sandboxed, strict, no HTML escaping (prompts are not HTML).

    ``{{ passage.items }}`` would normally return the dict's ``items`` method; rows are
    data, so for mappings a key of that name wins over a method."""

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, Mapping):
            try:
                return obj[attribute]
            except (KeyError, TypeError):
                pass
        return super().getattr(obj, attribute)


ENV = _RowEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)


def render_row(template: Template, name: str, row: dict[str, Any], column: str) -> str:
    try:
        return template.render(row)
    except TemplateError as exc:
        # StrictUndefined lands here: a missing field fails this row, loudly.
        raise ValueError(f"column {column!r}: {name} template: {exc}") from exc


def compile_template(source: str, name: str) -> Template:
    try:
        return ENV.from_string(source)
    except TemplateSyntaxError as exc:
        raise ValueError(f"{name} template: syntax error on line {exc.lineno}: {exc.message}") from None


class LLMTextParams(BaseModel):
    """``prompt`` and optional ``system`` are templates; every other key is passed to the
    chat model as a parameter (``temperature``, ``max_tokens``, ...)."""

    model_config = ConfigDict(extra="allow")

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
    def _check_extra(self) -> LLMTextParams:
        # Extra keys are model params, so a typo of a real field would otherwise be sent
        # to the model silently (and the template it held ignored).
        for key in self.model_params:
            close = difflib.get_close_matches(key, ["prompt", "system"], n=1, cutoff=0.75)
            if close:
                raise ValueError(f"unknown key {key!r}; did you mean {close[0]!r}?")
        return self

    @property
    def model_params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


def template_variables(source: str) -> set[str]:
    """What a template reads from its row: ``col`` or, where it reads a field of a column,
    ``col.field`` (the pre-flight checks a seed dataset has that field). Globals such as
    ``range`` are not columns."""
    tree = ENV.parse(source)
    # Column names never collide with these (the config refuses them), so a global here
    # is the global itself.
    roots = set(meta.find_undeclared_variables(tree)) - set(ENV.globals)
    # ``person.get(...)`` calls a method of the column: it reads ``person``, not a field.
    callees = {id(call.node) for call in tree.find_all(nodes.Call)}
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


class LLMText(Generator[LLMTextParams]):
    metadata = GeneratorMetadata(
        name="llm-text",
        description="Render a Jinja2 prompt (and optional system prompt) over each row "
        "and return the chat model's text.",
        required_resources={"model": ResourceKind.CHAT_MODEL},
    )
    params_model = LLMTextParams

    def __init__(self, *, column: str, params: LLMTextParams, resources: Resources, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._prompt = compile_template(params.prompt, "prompt")
        self._system = compile_template(params.system, "system") if params.system is not None else None
        self._model_params = params.model_params

    @classmethod
    def reads(cls, params: LLMTextParams) -> set[str]:
        names = template_variables(params.prompt)
        if params.system is not None:
            names |= template_variables(params.system)
        return names

    @classmethod
    def request_shape(cls, params: LLMTextParams, *, slot: str, column: str) -> dict[str, Any] | None:
        return {**params.model_params, "system": params.system}

    async def _one(self, row: dict[str, Any]) -> str:
        prompt = render_row(self._prompt, "prompt", row, self.column)
        system = render_row(self._system, "system", row, self.column) if self._system is not None else None
        text = await self.resources.model.complete(prompt, system=system, **self._model_params)
        if not isinstance(text, str) or not text.strip():
            raise ValueError("model returned empty text")
        return text

    async def generate(self, rows: list[dict[str, Any]]) -> list[str | RowFailure]:
        # All rows at once: the provider, not the generator, enforces the concurrency cap.
        return await gather_rows(self._one(row) for row in rows)
