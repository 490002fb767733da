"""Quality gates (SPEC §21), gate by gate: the built-ins' verdicts (through
``genwire.testing.assert_verdicts``), the errors a gate's params make at load, and what the
engine does with a verdict. The runs that keep N rows are in tests/test_gated_runs.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from genwire.cli.main import cli
from genwire.generators import Generator, GeneratorMetadata, Verdict
from genwire.generators.builtin.keep_if import KeepIf
from genwire.generators.builtin.keep_novel import KeepNovel
from genwire.generators.builtin.keep_unique import KeepUnique
from genwire.generators.builtin.keep_valid import KeepValid
from genwire.generators.outcome import RowFailure
from genwire.testing import FakeEmbeddingModel, assert_verdicts, gate_verdicts

# --- the built-ins' verdicts -----------------------------------------------------------------


async def test_keep_if_keeps_the_rows_its_expression_holds_for_and_says_why_not() -> None:
    rows = [
        {"verdict": {"score": 5}, "answer": "x" * 50},
        {"verdict": {"score": 3}, "answer": "x" * 50},
        {"verdict": {"score": 4}, "answer": "short"},
    ]
    expression = "verdict.score >= 4 and answer|length > 40"
    await assert_verdicts(KeepIf, rows, [True, "verdict.score >= 4", False], params={"expression": expression})


async def test_keep_if_fails_a_row_it_cannot_judge_instead_of_rejecting_it() -> None:
    [verdict] = await gate_verdicts(KeepIf, [{"verdict": {}}], params={"expression": "verdict.score >= 4"})
    assert isinstance(verdict, RowFailure)
    assert "score" in verdict.message


async def test_keep_valid_names_the_first_failing_path() -> None:
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"type": "integer"}}},
        "required": ["items"],
    }
    rows = [{"cell": {"items": [1, 2]}}, {"cell": {"items": [1, "two"]}}, {"cell": {}}]
    await assert_verdicts(
        KeepValid,
        rows,
        [True, "$.items[1]: 'two' is not of type 'integer'", "'items' is a required property"],
        params={"column": "cell", "schema": schema},
    )


async def test_keep_unique_drops_repeats_of_kept_values_exactly_or_normalized() -> None:
    rows = [{"q": "Hello  World"}, {"q": "hello world"}, {"q": "Hello  World"}, {"q": "other"}]
    await assert_verdicts(KeepUnique, rows, [True, True, "candidate 0", True], params={"column": "q"})
    await assert_verdicts(
        KeepUnique, rows, [True, "candidate 0", "candidate 0", True], params={"column": "q", "normalize": True}
    )


class PlannedEmbeddings(FakeEmbeddingModel):
    """Vectors a test chooses per text (others: the fake's hash vectors)."""

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        super().__init__(dimensions=2)
        self.vectors = vectors

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.vectors[t] for t in texts]


async def test_keep_novel_drops_a_row_as_close_as_the_threshold_to_a_kept_row() -> None:
    model = PlannedEmbeddings({"a": [1.0, 0.0], "near a": [0.95, 0.31], "far": [0.0, 1.0], "b": [0.6, 0.8]})
    rows = [{"t": "a"}, {"t": "near a"}, {"t": "far"}, {"t": "b"}]
    # cos(a, near a) = 0.951 >= 0.92: dropped; b: 0.8 to far, 0.6 to a: kept.
    await assert_verdicts(
        KeepNovel,
        rows,
        [True, "cosine 0.951 to candidate 0", True, True],
        params={"column": "t"},
        resources={"model": model},
    )
    # A dropped row is not "kept": nothing is compared with it.
    await assert_verdicts(
        KeepNovel,
        rows,
        [True, True, True, "to candidate 2"],
        params={"column": "t", "threshold": 0.99},
        resources={
            "model": PlannedEmbeddings({"a": [1.0, 0.0], "near a": [0.95, 0.31], "far": [0.6, 0.8], "b": [0.6, 0.8]})
        },
    )


async def test_assert_verdicts_lists_every_mismatch() -> None:
    with pytest.raises(AssertionError) as caught:
        await assert_verdicts(KeepIf, [{"n": 1}, {"n": 2}], [True, False], params={"expression": "n > 1"})
    assert "row 0: rejected (n > 1 is false), expected True" in str(caught.value)
    assert "row 1: kept, expected False" in str(caught.value)


async def test_gate_verdicts_refuses_a_generator_that_is_not_a_gate() -> None:
    class NotAGate(Generator[Any]):
        metadata = GeneratorMetadata(name="not-a-gate", description="d", required_resources={})

    with pytest.raises(AssertionError, match="gate=True"):
        await gate_verdicts(NotAGate, [{}])


def test_a_verdict_is_a_bool_and_a_text() -> None:
    assert Verdict(False, "too short") == Verdict(keep=False, reason="too short")
    with pytest.raises(TypeError):
        Verdict("yes")  # type: ignore[arg-type]


# --- errors at load --------------------------------------------------------------------------

CONFIG = """\
providers:
  nim: {kind: openai, base_url: "http://127.0.0.1:9/v1"}
models:
  writer: {provider: nim, model: w, kind: chat}
pipeline:
  columns:
    - {name: n, generator: sampler, params: {kind: uniform, low: 0, high: 9, integer: true}}
    - name: good
      generator: keep-if
      params:
        expression: "EXPRESSION"
    - {name: later, generator: template, params: {template: "LATER"}}
"""


def validate(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["validate", str(path)])
    return result.exit_code, result.stdout + result.stderr


def test_a_keep_if_syntax_error_is_located_at_the_expression(write_config: Callable[..., Path]) -> None:
    code, text = validate(write_config(CONFIG.replace("EXPRESSION", "n >= ").replace("LATER", "{{ n }}")))
    assert code == 2, text
    assert "genwire.yaml:11:9 pipeline.columns[1] (good).params.expression" in text
    assert "syntax error" in text and "Traceback" not in text


def test_a_keep_if_unknown_column_is_located_at_the_expression(write_config: Callable[..., Path]) -> None:
    code, text = validate(write_config(CONFIG.replace("EXPRESSION", "score >= 4").replace("LATER", "{{ n }}")))
    assert code == 2, text
    assert "genwire.yaml:11:9 pipeline.columns[1] (good).params.expression" in text
    assert "reads 'score', which is not a column" in text


def test_a_column_reading_a_gate_column_is_a_wiring_error(write_config: Callable[..., Path]) -> None:
    code, text = validate(write_config(CONFIG.replace("EXPRESSION", "n >= 4").replace("LATER", "{{ good }}")))
    assert code == 2, text
    assert "column 'later' reads 'good', a gate column" in text


def test_gates_are_listed_as_plugins_and_declare_their_resources() -> None:
    result = CliRunner().invoke(cli, ["plugins"])
    assert result.exit_code == 0
    for name in ("keep-if", "keep-valid", "keep-unique", "keep-novel"):
        assert name in result.stdout
    assert KeepNovel.metadata.required_resources == {"model": "embedding_model"}
    assert all(g.metadata.gate for g in (KeepIf, KeepValid, KeepUnique, KeepNovel))
