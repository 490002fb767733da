"""The hand-off's parts (SPEC §24) on their own: the streamed column statistics (exact,
then a sketch; the same in every process; every output format; a column Arrow cannot read
as one type), the Mermaid rendering of the wiring graph, and the pipeline text a run
records (a secret written literally is masked)."""

from __future__ import annotations

import csv
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from genwire.engine.handoff.card import column_stats
from genwire.engine.handoff.stats import EXACT_DISTINCT, OutputStats
from genwire.engine.report.wiring import Node, WiringGraph
from genwire.engine.report.wiring_mermaid import mermaid


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_small_columns_are_counted_exactly(tmp_path: Path) -> None:
    rows = [
        {"topic": ["tides", "rainbows", "tides", None][i % 4], "score": i % 3, "verdict": {"score": i % 2}}
        for i in range(100)
    ]
    stats = column_stats(write_jsonl(tmp_path / "o.jsonl", rows), ["topic", "score", "verdict"])
    topic, score, verdict = (stats.columns[c] for c in ("topic", "score", "verdict"))
    assert stats.rows == 100 and topic.null_pct == 25.0
    assert topic.distinct.count() == 2 and score.distinct.count() == 3 and verdict.distinct.count() == 2
    assert topic.mean_length == pytest.approx((5 + 8 + 5) / 3)
    assert score.mean_length is None  # a number has no text length


def test_many_distinct_values_are_estimated_within_a_few_percent(tmp_path: Path) -> None:
    rng = random.Random(3)
    n = 60_000
    rows = [{"id": f"{i:08x}", "text": f"answer {i}: " + "x" * rng.randint(40, 200), "n": i} for i in range(n)]
    rows += rows[:5000]  # repeats: distinct stays n
    stats = column_stats(write_jsonl(tmp_path / "o.jsonl", rows), ["id", "text", "n"])
    for name in ("id", "text", "n"):
        counter = stats.columns[name].distinct
        assert not counter.exact and counter.count() == pytest.approx(n, rel=0.04), name


def test_the_count_is_the_same_in_every_process(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "o.jsonl", [{"t": f"value {i}"} for i in range(3 * EXACT_DISTINCT)])
    script = (
        "import sys; from pathlib import Path; from genwire.engine.handoff.card import column_stats;"
        "print(column_stats(Path(sys.argv[1]), ['t']).columns['t'].distinct.count())"
    )
    counts = {
        subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    }
    assert len(counts) == 1  # Python's own hash() differs per process; these hashes do not


def test_csv_and_parquet_outputs_give_the_jsonl_figures(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"a": f"v{i % 7}", "b": None if i % 5 == 0 else f"text {i}"} for i in range(500)]
    expected = column_stats(write_jsonl(tmp_path / "o.jsonl", rows), ["a", "b"])
    with (tmp_path / "o.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["a", "b"])
        writer.writerows([[r["a"], r["b"]] for r in rows])
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "o.parquet")
    for suffix in (".csv", ".parquet"):
        got = column_stats(tmp_path / f"o{suffix}", ["a", "b"])
        for name in ("a", "b"):
            mine, theirs = got.columns[name], expected.columns[name]
            assert (mine.nulls, mine.distinct.count(), mine.mean_length) == (
                theirs.nulls,
                theirs.distinct.count(),
                theirs.mean_length,
            ), (suffix, name)


def test_a_column_of_two_kinds_is_read_row_by_row(tmp_path: Path) -> None:
    rows = [{"x": "text"}] * 3 + [{"x": 5}] * 20_000  # Arrow's reader sees text, then numbers
    stats = column_stats(write_jsonl(tmp_path / "o.jsonl", rows), ["x"])
    assert stats.rows == 20_003 and stats.columns["x"].distinct.count() == 2


def test_a_column_first_seen_late_counts_earlier_rows_as_null() -> None:
    stats = OutputStats(["a"])
    stats.add_rows([{"a": 1}, {"a": 2}])
    stats.add_rows([{"a": 3, "b": "x"}])
    assert stats.columns["b"].rows == 3 and stats.columns["b"].nulls == 2


def test_mermaid_labels_never_break_the_graph() -> None:
    graph = WiringGraph(
        [Node("model:m", "model", 'say "hi" <b>', "org/model[v2]"), Node("column:c", "column", "c", "llm-text")],
        [("model:m", "column:c")],
    )
    text = mermaid(graph)
    assert text.splitlines()[0] == "flowchart LR"
    assert 'r_say__hi___b_["say #quot;hi#quot; #lt;b#gt;<br/>model: org/model[v2]"]' in text
    assert "r_say__hi___b_ --> c_c" in text


def test_a_secret_written_in_the_pipeline_file_is_masked_when_recorded(tmp_path: Path) -> None:
    from genwire import boot
    from genwire.engine.report.about import run_about

    secret = "sk-literal-0123456789abcdef"
    config = tmp_path / "genwire.yaml"
    config.write_text(
        "providers:\n"
        f"  p: {{kind: openai, base_url: 'http://127.0.0.1:9/v1', api_key: {secret}}}\n"
        "models:\n  m: {provider: p, model: x, kind: chat}\n"
        "pipeline:\n  seed: 3\n  columns:\n"
        "    - {name: a, generator: llm-text, resources: {model: m}, params: {prompt: hi}}\n"
        "  card: {title: T, license: mit}\n",
        encoding="utf-8",
    )
    about = run_about(boot(config))
    assert secret not in json.dumps(about) and "api_key: ***" in about["pipeline"]["text"]
    assert about["seed"] == 3 and about["kinds"] == {"m": "openai"}
    assert (about["card"]["title"], about["card"]["license"]) == ("T", "mit")
    assert [n["id"] for n in about["wiring"]["nodes"]] == ["column:a", "model:m", "provider:p"]
