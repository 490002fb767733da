"""``keep-if``: a gate (SPEC §21) keeping the rows for which a Jinja2 expression over the
row is true (``verdict.score >= 4 and answer|length > 40``), evaluated in the sandbox."""

from __future__ import annotations

from typing import Any

from jinja2 import TemplateError, TemplateSyntaxError
from pydantic import BaseModel, ConfigDict, field_validator

from genwire.generators.base import Generator
from genwire.generators.builtin.common import ENV, template_variables
from genwire.generators.metadata import GeneratorMetadata
from genwire.generators.outcome import RowFailure
from genwire.generators.resources import Resources
from genwire.generators.verdict import Verdict


def compile_expression(source: str) -> Any:
    """The compiled expression; ValueError saying where Jinja found a syntax error."""
    try:
        return ENV.compile_expression(source, undefined_to_none=False)
    except TemplateSyntaxError as exc:
        where = f" (line {exc.lineno} of the expression)" if "\n" in source.strip() else ""
        raise ValueError(f"expression {source!r}: syntax error{where}: {exc.message}") from None


class KeepIfParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    expression: str

    @field_validator("expression")
    @classmethod
    def _compiles(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("expression must not be empty; write a Jinja2 test such as `score >= 4`")
        compile_expression(value)
        return value


class KeepIf(Generator[KeepIfParams]):
    metadata = GeneratorMetadata(
        name="keep-if",
        description="Gate: keep the rows for which a Jinja2 expression over the row is true "
        "(e.g. `verdict.score >= 4 and answer|length > 40`); the others go to the rejected file.",
        required_resources={},
        gate=True,
    )
    params_model = KeepIfParams

    def __init__(self, *, column: str, params: KeepIfParams, resources: Resources, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._expression = compile_expression(params.expression)
        self._shown = " ".join(params.expression.split())
        self._reason = f"{self._shown} is false"

    @classmethod
    def reads(cls, params: KeepIfParams) -> set[str]:
        return template_variables("{{ " + params.expression + " }}")

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        out: list[Any] = []
        for row in rows:
            try:
                keep = bool(self._expression(**row))
            except (TemplateError, TypeError, ValueError, ArithmeticError) as exc:  # this row cannot be judged
                out.append(RowFailure(ValueError(f"keep-if column {self.column!r}: {self._shown!r}: {exc}")))
                continue
            out.append(Verdict(True) if keep else Verdict(False, self._reason))
        return out
