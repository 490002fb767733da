"""``keep-valid``: a gate (SPEC §21) keeping the rows whose cell validates against a JSON
Schema; the reason of a rejection names the first failing path."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from genwire.generators.base import Generator
from genwire.generators.builtin.common import ColumnRef, resolve_ref
from genwire.generators.metadata import GeneratorMetadata
from genwire.generators.outcome import RowFailure
from genwire.generators.resources import Resources
from genwire.generators.verdict import Verdict
from genwire.providers.structured import unresolvable_ref


class KeepValidParams(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True, populate_by_name=True)

    column: ColumnRef
    json_schema: dict[str, Any] = Field(alias="schema")

    @field_validator("json_schema")
    @classmethod
    def _check_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
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


def json_path(parts: Any) -> str:
    """``$.answer.items[2]``: where in the cell a schema error is."""
    text = "$"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


class KeepValid(Generator[KeepValidParams]):
    metadata = GeneratorMetadata(
        name="keep-valid",
        description="Gate: keep the rows whose cell (column or column.field) validates against a "
        "JSON Schema; a rejection's reason names the first failing path.",
        required_resources={},
        gate=True,
    )
    params_model = KeepValidParams

    def __init__(self, *, column: str, params: KeepValidParams, resources: Resources, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        import jsonschema

        self._validator = jsonschema.Draft202012Validator(params.json_schema)

    @classmethod
    def reads(cls, params: KeepValidParams) -> set[str]:
        return {params.column}

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        out: list[Any] = []
        for row in rows:
            try:
                value = resolve_ref(row, self.params.column)
            except ValueError as exc:
                out.append(RowFailure(exc))
                continue
            errors = sorted(
                self._validator.iter_errors(value), key=lambda e: (list(map(str, e.absolute_path)), e.message)
            )
            if not errors:
                out.append(Verdict(True))
            else:
                first = errors[0]
                out.append(Verdict(False, f"{json_path(first.absolute_path)}: {first.message}"))
        return out
