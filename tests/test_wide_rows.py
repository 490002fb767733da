"""Wide rows cost what they hold (issue 33 item 17): 10,000 template columns took 104 s for
2 rows because every column deep-copied every row and Jinja copied it twice more. These
tests count the copies (benchmarks/many_columns.py has the timings)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import genwire
from genwire.generators import Generator, GeneratorMetadata
from genwire.generators.builtin.template import Template, TemplateParams
from genwire.generators.outcome import RowFailure
from genwire.generators.resources import Resources


class CountedText(str):
    """A string that counts how often it is deep-copied."""

    copies = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> CountedText:
        CountedText.copies += 1
        return self


class Counted(Generator[Any]):
    metadata = GeneratorMetadata(name="counted", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [CountedText("v") for _ in rows]


class Reader(Generator[Any]):
    metadata = GeneratorMetadata(name="reader", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [len(row) for row in rows]


async def test_text_an_earlier_column_wrote_is_not_copied_for_each_later_column(tmp_path: Path) -> None:
    columns = [{"name": f"c{i}", "generator": "counted"} for i in range(40)]
    columns.append({"name": "width", "generator": "reader"})
    cfg = {"pipeline": {"num_records": 3, "output": str(tmp_path / "o.jsonl"), "columns": columns}}
    container = genwire.boot(cfg, generators=[Counted, Reader])
    CountedText.copies = 0
    async with container:
        await container.run(skip_preflight=True)
    assert CountedText.copies == 0  # was 3 rows x (0 + 1 + ... + 40) = 2,460 copies
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [row["width"] for row in rows] == [40] * 3


class NoCopies(Mapping[str, Any]):
    """A row that fails the test if anything copies it whole (iterates its keys)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("the row was copied whole")

    def __len__(self) -> int:
        return len(self._values)

    def keys(self) -> Any:
        raise AssertionError("the row was copied whole")


async def test_a_template_reads_the_names_it_uses_without_copying_the_row() -> None:
    params = TemplateParams(template="{{ a }}-{{ b.x }}-{{ range(2) | list | length }}")
    template = Template(column="t", params=params, resources=Resources("template", "t", {}))
    row = NoCopies({"a": 1, "b": {"x": "y"}, **{f"c{i}": i for i in range(1000)}})
    assert await template.generate([row]) == ["1-y-2"]  # type: ignore[list-item]


async def test_a_template_still_fails_its_row_on_a_missing_name() -> None:
    template = Template(
        column="t", params=TemplateParams(template="{{ missing }}"), resources=Resources("template", "t", {})
    )
    [failure] = await template.generate([{"a": 1}])
    assert isinstance(failure, RowFailure)
    assert "'missing' is undefined" in str(failure.error)
