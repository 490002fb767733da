"""Quality gates (SPEC §21), gate by gate: the built-ins' verdicts (through
``genwire.testing.assert_verdicts``), the errors a gate's params make at load, and what the
engine does with a verdict. The runs that keep N rows are in tests/test_gated_runs.py."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import genwire
from genwire.cli.main import cli
from genwire.engine.gates.plan import CandidatePlan
from genwire.engine.records.batch_result import BatchResult
from genwire.engine.records.funnel import Funnel
from genwire.errors import PluginError
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


@pytest.mark.parametrize(
    ("expression", "limit"),
    [
        ("('a' * 10**8)|length > 0", "100,000,000 characters or items"),
        ("([1, 2] * 10**7)|length > 0", "20,000,000 characters or items"),
        ("10 ** 10 ** 10 ** 10 ** 10 > 0", "over 10,000 bits"),  # Jinja reads it (((10**10)**10)**10)**10
        ("2 ** 100000 > 0", "over 10,000 bits"),
        ("('%099999999d' % n)|length > 0", "a width of 99999999"),
        ("('{:>99999999}'.format(n))|length > 0", "a width of 99999999"),
        ("('{:>{w}}'.format(n, w=10**9))|length > 0", "a width from an argument"),
        ("(answer.center(10**9))|length > 0", "1,000,000,000 characters"),
        ("(answer|center(10**9))|length > 0", "1,000,000,000 characters"),
        ("(answer|indent(10**8))|length > 0", "100,000,000 characters"),
        ("('%099999999d'|format(n))|length > 0", "a width of 99999999"),
    ],
)
async def test_keep_if_bounds_what_one_expression_may_build(expression: str, limit: str) -> None:
    import tracemalloc

    tracemalloc.start()
    try:
        [verdict] = await gate_verdicts(KeepIf, [{"answer": "ab", "n": 1}], params={"expression": expression})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(verdict, RowFailure), verdict
    assert "keep-if column 'gate'" in verdict.message, verdict.message
    assert repr(expression) in verdict.message and limit in verdict.message, verdict.message
    assert peak < 8 * 2**20  # nothing of the value was built


async def test_keep_if_within_the_bounds_still_works() -> None:
    expression = (
        "('ab' * 1000)|length == 2000 and 2 ** 64 > 0 and ('%5d' % n)|length == 5 and '{:>4}'.format(n) == '   1'"
    )
    await assert_verdicts(KeepIf, [{"n": 1}], [True], params={"expression": expression})


def test_templates_share_the_bounds() -> None:
    from jinja2.sandbox import SecurityError

    from genwire.generators.builtin.common import ENV

    with pytest.raises(SecurityError, match="the limit is 1,000,000"):
        ENV.from_string("{{ topic * 10**8 }}").render(topic="a")


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


# --- what the engine does with a verdict (no model: the pipeline is local) -------------------


class SaysMaybe(Generator[Any]):
    metadata = GeneratorMetadata(name="says-maybe", description="x", required_resources={}, gate=True)

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return ["maybe" for _ in rows]


class FailsOdd(Generator[Any]):
    """A gate that cannot judge odd n (an error, not a verdict)."""

    metadata = GeneratorMetadata(name="fails-odd", description="x", required_resources={}, gate=True)

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [RowFailure(ValueError("cannot judge")) if r["n"] % 2 else Verdict(True) for r in rows]


def local(tmp_path: Path, gate: str, n: int = 6, **extra: Any) -> dict[str, Any]:
    return {
        "pipeline": {
            "num_records": n,
            "seed": 1,
            "batch_size": 4,
            "output": str(tmp_path / "o.jsonl"),
            "columns": [
                {
                    "name": "n",
                    "generator": "sampler",
                    "params": {"kind": "uniform", "low": 0, "high": 1000, "integer": True},
                },
                {"name": "g", "generator": gate},
            ],
            **extra,
        }
    }


async def test_a_gate_that_returns_no_verdict_stops_the_run_naming_it(tmp_path: Path) -> None:
    container = genwire.boot(local(tmp_path, "says-maybe"), generators=[SaysMaybe])
    async with container:
        with pytest.raises(PluginError, match=r"gate 'says-maybe' \(column 'g'\) returned str.*Verdict"):
            await container.run()


async def test_a_gate_that_fails_fails_the_row_not_rejects_it(tmp_path: Path) -> None:
    container = genwire.boot(local(tmp_path, "fails-odd", max_failure_rate=1.0), generators=[FailsOdd])
    async with container:
        result = await container.run()
    assert result.rows_written == 6 and result.funnel is not None
    errors = [json.loads(line) for line in (tmp_path / "o.jsonl.errors.jsonl").read_text().splitlines()]
    assert errors and all(e["column"] == "g" and "cannot judge" in e["error"] for e in errors)
    assert result.funnel.failed == len(errors) and result.funnel.rejected == {}
    rejected = [json.loads(line) for line in (tmp_path / "o.jsonl.rejected.jsonl").read_text().splitlines()]
    assert all(r["reason"] == "surplus" for r in rejected)  # failures are not rejections


# --- the schedule (engine-independent) -------------------------------------------------------


def result_of(start: int, kept: int, rejected: int) -> BatchResult:
    indices = list(range(start, start + kept))
    records = [{"candidate": start + kept + i, "gate": "g", "reason": "r", "row": {}} for i in range(rejected)]
    return BatchResult(indices, [{} for _ in indices], [], rejected=records, size=kept + rejected)


def test_the_plan_schedules_from_the_measured_rate_and_stops_at_the_target() -> None:
    plan = CandidatePlan(wanted=10, cap=1000, pending=iter(range(1000)), funnel=Funnel(wanted=10))
    first = plan.take(8)
    second = plan.take(8)
    assert first == list(range(8)) and second == [8, 9]  # nothing measured: one candidate per row
    assert plan.take(8) == []  # enough in flight for now
    plan.record(result_of(0, 2, 6))  # 25 % kept
    assert plan.take(100) is not None
    assert 20 <= plan.in_flight <= 40  # about (10 - 2) / 0.25 in flight
    plan.funnel.kept = 10
    assert plan.take(8) is None and plan.met and not plan.capped


def test_ray_blocks_take_the_plans_candidates_only_as_blocks_start_them() -> None:
    """The Ray driver's rows (``BlockRows``) asks the plan for candidates as the local
    engine does, batch by batch as blocks take them: none is started past the target."""
    from genwire.engine.cluster.block_rows import BlockRows

    plan = CandidatePlan(wanted=10, cap=1000, pending=iter(range(1000)), funnel=Funnel(wanted=10))
    rows = BlockRows(iter(()), plan.feed(4))
    assert rows.window == 10 and rows.take(8) == list(range(8)) and rows.take(8) == [8, 9]
    assert not rows.more()  # the plan: enough in flight for now
    plan.record(result_of(0, 2, 6))  # 25 % kept: about 30 more wanted in flight
    assert rows.take(4) == [10, 11, 12, 13] and plan.scheduled == 14  # asked for one block's rows only
    plan.record(result_of(8, 2, 0))
    plan.record(result_of(10, 4, 0))
    plan.funnel.kept = 10  # the target is met: nothing more starts
    assert not rows.more() and rows.take(4) == [] and plan.scheduled == 14


def test_the_plan_reports_the_cap() -> None:
    plan = CandidatePlan(wanted=10, cap=12, pending=iter(range(12)), funnel=Funnel(wanted=10))
    assert plan.take(8) == list(range(8))
    plan.record(result_of(0, 1, 7))
    assert plan.take(8) == [8, 9, 10, 11]
    plan.record(result_of(8, 1, 3))
    assert plan.take(8) is None and plan.capped
    error = plan.stopped(Path("ckpt"))
    assert error.funnel is not None and error.funnel["kept"] == 2 and error.funnel["candidates"] == 12
    assert "max_candidates (12)" in str(error) and "raise pipeline.max_candidates" in str(error)


def test_a_damaged_rejected_line_is_warned_about_and_its_candidate_generated_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from genwire.engine.records.checkpoint import Checkpoint

    directory = tmp_path / "o.jsonl.checkpoint"
    opened = Checkpoint.open(directory, {"k": "v"}, 5, fresh=False, fresh_hint="--fresh", candidates=50)
    record = {"candidate": 1, "gate": "g", "reason": "no", "row": {"n": 1}}
    opened.append([(0, b'{"i": 0, "row": {"n": 0}}\n')], [], [(1, "g", (json.dumps(record) + "\n").encode())])
    opened.append([], [], [(2, "g", b"{not json\n")])
    opened.close()
    again = Checkpoint.open(directory, {"k": "v"}, 5, fresh=False, fresh_hint="--fresh", candidates=50)
    try:
        assert "rejected-0001.jsonl line 2 cannot be used" in caplog.text
        assert again.rejections.by_gate == {"g": 1}
        assert list(itertools.islice(again.pending(), 3)) == [2, 3, 4]  # 0 kept, 1 rejected, 2 again
        assert [r["candidate"] for r in again.rejected()] == [1]
    finally:
        again.close()
