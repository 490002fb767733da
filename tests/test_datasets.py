"""Datasets: jsonl, csv, parquet files and chunked document directories."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa  # the parquet extra is part of the test install
import pyarrow.parquet as pq
import pytest

from genwire.config.schema import DocumentsDatasetConfig, FileDatasetConfig
from genwire.errors import DatasetError
from genwire.providers.base import Dataset
from genwire.providers.datasets import LazyDataset, chunk_text, open_dataset


def _file(kind: str, path: Path) -> LazyDataset:
    return open_dataset("ds", FileDatasetConfig(kind=kind, path=str(path)), path)  # type: ignore[arg-type]


def _docs(path: Path, chunk_chars: int = 800) -> LazyDataset:
    config = DocumentsDatasetConfig(kind="documents", path=str(path), chunk_chars=chunk_chars)
    return open_dataset("docs", config, path)


async def _all_rows(ds: LazyDataset) -> list[dict[str, Any]]:
    return [row async for row in ds.rows()]


@pytest.fixture
def people(tmp_path: Path) -> Path:
    path = tmp_path / "people.jsonl"
    lines = [
        json.dumps({"name": "ada", "age": 36}),
        "",
        json.dumps({"name": "alan", "tags": ["x", "y"]}),
        "   ",
        json.dumps({"age": 41, "city": "London"}),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- jsonl ---------------------------------------------------------------------------


async def test_jsonl_loads_rows_and_columns_in_first_seen_order(people: Path) -> None:
    ds = _file("jsonl", people)
    assert isinstance(ds, Dataset)
    assert (ds.name, ds.kind, ds.path) == ("ds", "jsonl", people)
    assert len(ds) == 3  # blank lines are skipped
    assert ds.columns == ["name", "age", "tags", "city"]
    assert await _all_rows(ds) == [
        {"name": "ada", "age": 36},
        {"name": "alan", "tags": ["x", "y"]},
        {"age": 41, "city": "London"},
    ]
    assert ds.row(1)["name"] == "alan"
    with pytest.raises(IndexError, match="out of range"):
        ds.row(3)


async def test_rows_sample_and_row_return_copies(people: Path) -> None:
    ds = _file("jsonl", people)
    for row in await _all_rows(ds):
        row.clear()
    ds.row(1)["tags"].append("z")
    ds.sample(3, seed=0)[0]["name"] = "changed"
    assert await _all_rows(ds) == [
        {"name": "ada", "age": 36},
        {"name": "alan", "tags": ["x", "y"]},
        {"age": 41, "city": "London"},
    ]
    cols = ds.columns
    cols.append("oops")
    assert "oops" not in ds.columns


def test_jsonl_malformed_line_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": \n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"bad\.jsonl:3: invalid JSON"):
        _file("jsonl", path).load()


def test_jsonl_non_object_line_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "list.jsonl"
    path.write_text('{"a": 1}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"list\.jsonl:2: expected a JSON object, got an array"):
        len(_file("jsonl", path))


def test_jsonl_non_utf8_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"a": "ok"}\n{"a": "caf\xe9"}\n')
    with pytest.raises(DatasetError, match=r"latin1\.jsonl:2: not valid UTF-8"):
        _file("jsonl", path).load()


def test_jsonl_tolerates_bom_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n{"a": 2}\r\n')
    ds = _file("jsonl", path)
    assert ds.columns == ["a"]
    assert [ds.row(i)["a"] for i in range(len(ds))] == [1, 2]


def test_empty_file_loads_with_no_rows(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    ds = _file("jsonl", path)
    assert len(ds) == 0
    assert ds.columns == []
    assert ds.sample(5, seed=1) == []
    assert ds  # an empty dataset is still truthy


# --- loading -------------------------------------------------------------------------


def test_construction_does_no_io_and_missing_file_fails_on_load(tmp_path: Path) -> None:
    path = tmp_path / "nope.jsonl"
    ds = _file("jsonl", path)  # no error yet
    assert not ds.loaded
    assert "jsonl" in repr(ds) and str(path) in repr(ds)
    with pytest.raises(DatasetError, match=r"nope\.jsonl: no such file"):
        ds.load()


@pytest.mark.parametrize("kind", ["jsonl", "csv", "parquet"])
def test_directory_where_file_expected(tmp_path: Path, kind: str) -> None:
    with pytest.raises(DatasetError, match=f"is a directory, expected a {kind} file"):
        _file(kind, tmp_path).load()


def test_load_is_idempotent_and_thread_safe(people: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = _file("jsonl", people)
    calls = 0
    original = type(ds)._read
    gate = threading.Barrier(8)

    def counting_read(self: LazyDataset) -> tuple[list[dict[str, Any]], list[str]]:
        nonlocal calls
        calls += 1
        return original(self)

    monkeypatch.setattr(type(ds), "_read", counting_read)

    def worker() -> None:
        gate.wait()
        ds.load()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ds.load()
    assert calls == 1
    assert ds.loaded and len(ds) == 3
    assert "3 rows" in repr(ds)


async def test_rows_loads_implicitly(people: Path) -> None:
    ds = _file("jsonl", people)
    assert len(await _all_rows(ds)) == 3
    assert ds.loaded


# --- sample --------------------------------------------------------------------------


def test_sample_is_seeded_without_replacement(tmp_path: Path) -> None:
    path = tmp_path / "n.jsonl"
    path.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(100)), encoding="utf-8")
    ds = _file("jsonl", path)
    first = ds.sample(10, seed=7)
    assert first == ds.sample(10, seed=7)
    assert first != ds.sample(10, seed=8)
    assert len({row["i"] for row in first}) == 10
    everything = ds.sample(500, seed=1)  # capped at len, still no repeats
    assert sorted(row["i"] for row in everything) == list(range(100))
    assert ds.sample(0, seed=1) == []
    with pytest.raises(ValueError):
        ds.sample(-1, seed=1)


# --- csv -----------------------------------------------------------------------------


async def test_csv_loads_strings(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text('name,age,bio\nada,36,"line one\nline two"\n\nalan,41,"says ""hi"""\n')
    ds = _file("csv", path)
    assert ds.columns == ["name", "age", "bio"]
    assert len(ds) == 2
    assert await _all_rows(ds) == [
        {"name": "ada", "age": "36", "bio": "line one\nline two"},
        {"name": "alan", "age": "41", "bio": 'says "hi"'},
    ]


def test_csv_ragged_row_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "ragged.csv"
    path.write_text('a,b\n1,2\n"x\ny",2\n1,2,3\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"ragged\.csv:5: expected 2 fields .* got 3"):
        _file("csv", path).load()


def test_csv_header_only_and_bom(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_bytes(b"\xef\xbb\xbfa,b\r\n")
    ds = _file("csv", path)
    assert (len(ds), ds.columns) == (0, ["a", "b"])


def test_csv_duplicate_header(tmp_path: Path) -> None:
    path = tmp_path / "dup.csv"
    path.write_text("a,b,a\n1,2,3\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="'a' appears twice"):
        _file("csv", path).load()


def test_csv_non_utf8_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"a,b\n1,2\n3,caf\xe9\n")
    with pytest.raises(DatasetError, match=r"latin1\.csv:3: not valid UTF-8"):
        _file("csv", path).load()


# --- parquet -------------------------------------------------------------------------


async def test_parquet_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "text": ["a", "b", None]}), path)
    ds = _file("parquet", path)
    assert ds.columns == ["id", "text"]
    assert len(ds) == 3
    assert await _all_rows(ds) == [
        {"id": 1, "text": "a"},
        {"id": 2, "text": "b"},
        {"id": 3, "text": None},
    ]


def test_parquet_empty_keeps_schema_columns(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"x": pa.array([], pa.int64())}), path)
    ds = _file("parquet", path)
    assert (len(ds), ds.columns) == (0, ["x"])


def test_parquet_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"not parquet at all")
    with pytest.raises(DatasetError, match=r"bad\.parquet: not a valid parquet file"):
        _file("parquet", path).load()


def test_parquet_without_pyarrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DatasetError, match=r"pip install 'genwire\[parquet\]'"):
        _file("parquet", path).load()


# --- documents -----------------------------------------------------------------------


def _write_corpus(root: Path) -> None:
    (root / "guide").mkdir(parents=True)
    (root / "b.md").write_text("# Title\n\nShort intro.\n", encoding="utf-8")
    (root / "a.txt").write_text(
        "First paragraph is here.\n\n"
        + " ".join(f"Sentence number {i} is short." for i in range(12))
        + "\n\n\n   \n"
        + "Tail   paragraph\twith   odd\n whitespace.\n",
        encoding="utf-8",
    )
    (root / "guide" / "deep.md").write_text("x" * 130 + " end.", encoding="utf-8")
    (root / "ignored.rst").write_text("not read", encoding="utf-8")


async def test_documents_rows_ids_and_sources(tmp_path: Path) -> None:
    _write_corpus(tmp_path)
    ds = _docs(tmp_path, chunk_chars=60)
    assert ds.columns == ["id", "source", "text"]
    rows = await _all_rows(ds)
    assert [r["source"] for r in rows] == sorted(r["source"] for r in rows)
    assert {r["source"] for r in rows} == {"a.txt", "b.md", "guide/deep.md"}
    for source in ("a.txt", "b.md", "guide/deep.md"):
        ids = [r["id"] for r in rows if r["source"] == source]
        assert ids == [f"{source}#{i}" for i in range(len(ids))]
    assert [r["text"] for r in rows if r["source"] == "b.md"] == ["# Title Short intro."]

    a_texts = [r["text"] for r in rows if r["source"] == "a.txt"]
    assert a_texts[0] == "First paragraph is here."
    assert a_texts[-1].endswith("Tail paragraph with odd whitespace.")
    for text in a_texts:
        assert len(text) <= 60
        assert text == " ".join(text.split())  # whitespace normalised
        assert text.endswith(".")  # every cut fell on a sentence boundary

    # Stable across runs: a fresh dataset gives the same ids and passages.
    assert await _all_rows(_docs(tmp_path, chunk_chars=60)) == rows


def test_documents_over_long_word_is_the_only_cut(tmp_path: Path) -> None:
    _write_corpus(tmp_path)
    deep = [r for r in _docs(tmp_path, chunk_chars=60).sample(100, 0) if "deep" in r["source"]]
    texts = [r["text"] for r in sorted(deep, key=lambda r: int(r["id"].split("#")[1]))]
    assert all(len(t) <= 60 for t in texts)
    assert "".join(texts).replace(" ", "") == "x" * 130 + "end."


def test_documents_endpoint_key_includes_chunk_chars(tmp_path: Path) -> None:
    ds = _docs(tmp_path, chunk_chars=100)
    assert ds.endpoint_key == ("dataset", "documents", str(tmp_path), 100)
    assert _file("csv", tmp_path / "x.csv").endpoint_key == (
        "dataset",
        "csv",
        str(tmp_path / "x.csv"),
    )


def test_documents_errors(tmp_path: Path) -> None:
    (tmp_path / "notes.rst").write_text("hello", encoding="utf-8")
    with pytest.raises(DatasetError, match=r"no \.txt or \.md files under"):
        _docs(tmp_path).load()
    with pytest.raises(DatasetError, match="no such directory"):
        _docs(tmp_path / "missing").load()
    with pytest.raises(DatasetError, match="is not a directory"):
        _docs(tmp_path / "notes.rst").load()


def test_documents_non_utf8_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "ok.md").write_text("fine", encoding="utf-8")
    (tmp_path / "bad.txt").write_bytes(b"line one\ncaf\xe9\n")
    with pytest.raises(DatasetError, match=r"bad\.txt:2: not valid UTF-8"):
        _docs(tmp_path).load()


# --- chunking ------------------------------------------------------------------------


def test_chunk_text_prefers_paragraphs_then_sentences_then_words() -> None:
    assert chunk_text("One.\n\nTwo.\n \n\nThree.", 100) == ["One. Two. Three."]
    assert chunk_text("Alpha beta.\n\nGamma delta.", 12) == ["Alpha beta.", "Gamma delta."]
    assert chunk_text("Aa bb. Cc dd! Ee ff?", 13) == ["Aa bb. Cc dd!", "Ee ff?"]
    assert chunk_text("one two three four", 9) == ["one two", "three", "four"]
    assert chunk_text("abcdefghij", 4) == ["abcd", "efgh", "ij"]
    assert chunk_text(" \n\n \t ", 50) == []


def test_chunk_text_keeps_every_word_and_respects_limit() -> None:
    words = [f"w{i}" + ("." if i % 7 == 6 else "") for i in range(2000)]
    text = "\n\n".join(" ".join(words[i : i + 40]) for i in range(0, 2000, 40))
    passages = chunk_text(text, 120)
    assert all(0 < len(p) <= 120 for p in passages)
    assert " ".join(passages).split() == words
