"""Assert a gate's verdicts on given rows (SPEC §21), in a plugin's own tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from genwire.generators.base import Generator
from genwire.generators.outcome import RowFailure
from genwire.generators.resources import Resources
from genwire.generators.verdict import Verdict, as_verdict

Expected = bool | str  # True: kept; False: rejected; text: rejected with a reason containing it


async def gate_verdicts(
    gate: type[Generator[Any]],
    rows: Sequence[Mapping[str, Any]],
    *,
    params: Mapping[str, Any] | None = None,
    resources: Mapping[str, Any] | None = None,
    column: str = "gate",
) -> list[Verdict | RowFailure]:
    """The verdicts of ``gate`` (a gate's class, built with ``params`` and ``resources``,
    e.g. a ``FakeEmbeddingModel``) on ``rows``, given as candidates 0, 1, 2... in one batch
    (an in-order gate compares each with the kept rows before it). A row the gate could not
    judge comes back as its ``RowFailure``."""
    if not gate.metadata.gate:
        raise AssertionError(f"{gate.__qualname__} is not a gate: its metadata lacks gate=True")
    instance = gate(
        column=column,
        params=gate.params_model.model_validate(dict(params or {})),
        resources=Resources(gate.metadata.name, column, dict(resources or {})),
    )
    values = await instance.generate_batch([dict(r) for r in rows], list(range(len(rows))))
    if not isinstance(values, list) or len(values) != len(rows):
        raise AssertionError(f"{gate.__qualname__} returned {values!r} for {len(rows)} rows")
    out: list[Verdict | RowFailure] = []
    for i, value in enumerate(values):
        verdict = value if isinstance(value, RowFailure) else as_verdict(value)
        if verdict is None:
            raise AssertionError(f"{gate.__qualname__} returned {value!r} for row {i}: not True, False or a Verdict")
        out.append(verdict)
    return out


async def assert_verdicts(
    gate: type[Generator[Any]],
    rows: Sequence[Mapping[str, Any]],
    expected: Sequence[Expected],
    **options: Any,
) -> None:
    """Fail (AssertionError listing every mismatch) unless ``gate`` keeps and rejects
    ``rows`` as ``expected`` says: True kept, False rejected, a text rejected with a reason
    that contains it. ``options``: ``params``, ``resources``, ``column``."""
    if len(expected) != len(rows):
        raise AssertionError(f"{len(expected)} expected verdicts for {len(rows)} rows")
    got = await gate_verdicts(gate, rows, **options)
    wrong = []
    for i, (verdict, want) in enumerate(zip(got, expected, strict=True)):
        said = "" if isinstance(verdict, RowFailure) else ("kept" if verdict.keep else f"rejected ({verdict.reason})")
        if isinstance(verdict, RowFailure):
            wrong.append(f"row {i}: failed ({verdict.message}), expected {want!r}")
        elif isinstance(want, bool) and verdict.keep != want:
            wrong.append(f"row {i}: {said}, expected {want}")
        elif isinstance(want, str) and (verdict.keep or want not in verdict.reason):
            wrong.append(f"row {i}: {said}, expected a rejection for {want!r}")
    if wrong:
        raise AssertionError(f"{gate.__qualname__}: verdicts differ:\n" + "\n".join(f"  {w}" for w in wrong))
