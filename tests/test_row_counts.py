"""Huge row counts (issue 33 item 14): memory does not grow with num_records before rows
exist, and a count no row index can number is refused naming the value and the limit."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from support import cli, write

import genwire
from genwire.engine.records.checkpoint import Checkpoint
from genwire.errors import ConfigError

# Every row fails at its second column: the failure-rate stop ends the run after one batch.
FAILING = {
    "pipeline": {
        "columns": [
            {"name": "c0", "generator": "sampler", "params": {"kind": "category", "values": [{"name": "a"}]}},
            {"name": "c1", "generator": "template", "params": {"template": "{{ c0.extra }}"}},
        ]
    }
}


def test_a_hundred_billion_rows_start_like_any_run(tmp_path: Path) -> None:
    config = write({"pipeline": {**FAILING["pipeline"], "output": str(tmp_path / "o.jsonl")}}, tmp_path / "g.yaml")
    result = cli("run", config, "-n", "100000000000", "--json")
    assert result.returncode == 1, result.stderr
    summary = json.loads(result.stdout)  # one JSON object, the run's own failure
    assert summary["ok"] is False and summary["rows_kept"] == 0
    assert "stopped after 64 rows" in summary["error"] and "of 100,000,000,000 rows" in summary["error"]
    assert "MemoryError" not in result.stderr


def test_a_checkpoint_of_a_trillion_rows_costs_no_memory_until_rows_exist(tmp_path: Path) -> None:
    tracemalloc.start()
    try:
        checkpoint = Checkpoint.open(tmp_path / "cp", {}, 10**12, fresh=False, fresh_hint="--fresh")
        try:
            pending = checkpoint.pending()
            assert [next(pending) for _ in range(3)] == [0, 1, 2]
            checkpoint.append([(0, b'{"i": 0, "row": {}}\n'), (2, b'{"i": 2, "row": {}}\n')], [])
            _, peak = tracemalloc.get_traced_memory()
        finally:
            checkpoint.close()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # was one byte per row: 1 TB
    resumed = Checkpoint.open(tmp_path / "cp", {}, 10**12, fresh=False, fresh_hint="--fresh")
    try:
        assert resumed.resumed == 2
        pending = resumed.pending()
        assert [next(pending) for _ in range(3)] == [1, 3, 4]
    finally:
        resumed.close()


@pytest.mark.parametrize("value", ["1e22", "10000000000000000000000", str(2**63)])
def test_a_row_count_no_index_can_number_is_refused_on_the_command_line(tmp_path: Path, value: str) -> None:
    config = write({"pipeline": {**FAILING["pipeline"], "output": str(tmp_path / "o.jsonl")}}, tmp_path / "g.yaml")
    result = cli("run", config, "-n", value, "--json")
    assert result.returncode == 2, result.stderr
    assert f"Invalid value for '-n': {value}: more rows than a row index can number" in result.stderr
    assert "9,223,372,036,854,775,807" in result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout)["ok"] is False
    assert not (tmp_path / "o.jsonl.checkpoint").exists()


@pytest.mark.parametrize(
    ("value", "shown"), [("1e22", "1e+22"), ("10000000000000000000000", "10000000000000000000000")]
)
def test_a_row_count_no_index_can_number_is_refused_in_the_config(tmp_path: Path, value: str, shown: str) -> None:
    path = tmp_path / "g.yaml"
    path.write_text(
        f"pipeline:\n  num_records: {value}\n  columns:\n    - {{name: c, generator: template}}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        genwire.boot(path)
    assert (
        "g.yaml:2:3 pipeline.num_records: more rows than a row index can number: at most 9,223,372,036,854,775,807"
        f" (a 64-bit integer) (got {shown})"
    ) in str(caught.value)
    result = cli("run", path, "--json")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "at most 9,223,372,036,854,775,807" in json.loads(result.stdout)["error"]


def test_a_whole_number_in_exponent_form_is_a_row_count(tmp_path: Path) -> None:
    config = write(
        {
            "pipeline": {
                "output": str(tmp_path / "o.jsonl"),
                "columns": [{"name": "c", "generator": "template", "params": {"template": "x"}}],
            }
        },
        tmp_path / "g.yaml",
    )
    result = cli("run", config, "-n", "3e0", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows_written"] == 3
    refused = cli("run", config, "-n", "2.5", "--json")
    assert refused.returncode == 2 and "'2.5' is not a whole number of rows" in refused.stderr
