"""``template``: a Jinja2 template rendered over the row, no model involved (ids, labels,
reformatting a field)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from genwire.generators.base import Generator
from genwire.generators.builtin.common import compile_template, render_over, template_variables
from genwire.generators.metadata import GeneratorMetadata
from genwire.generators.outcome import RowFailure
from genwire.generators.resources import Resources


class TemplateParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    template: str

    @field_validator("template")
    @classmethod
    def _compiles(cls, value: str) -> str:
        compile_template(value, "template")
        return value


class Template(Generator[TemplateParams]):
    metadata = GeneratorMetadata(
        name="template",
        description="Render a Jinja2 template over each row (no model): ids, labels, reformatted fields.",
        required_resources={},
    )
    params_model = TemplateParams

    def __init__(self, *, column: str, params: TemplateParams, resources: Resources, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._template = compile_template(params.template, "template")

    @classmethod
    def reads(cls, params: TemplateParams) -> set[str]:
        return template_variables(params.template)

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        out: list[Any] = []
        for row in rows:
            try:
                out.append(render_over(self._template, row))
            except Exception as exc:  # a missing field fails this row only
                out.append(RowFailure(ValueError(f"template column {self.column!r}: {exc}")))
        return out
