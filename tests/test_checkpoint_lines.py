"""The checkpoint's line files read at the end of a run (ledger, rejected files): streamed
whole lines, and a torn last line cut by reading from the end (issue 53: a 1,000,000-row
run's ledger is hundreds of MB, and reading it whole had tripled a 100,000-row run's peak RSS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from genwire.engine.records.checkpoint_files import TAIL_CHUNK, cut_torn_line, whole_lines


@pytest.mark.parametrize("torn", [b"", b'{"m":"w","in"', b"x" * (3 * TAIL_CHUNK + 5)], ids=["whole", "short", "long"])
def test_a_torn_last_line_is_neither_read_nor_kept(tmp_path: Path, torn: bytes) -> None:
    path = tmp_path / "ledger.jsonl"
    lines = [b'{"n":%d}\n' % i for i in range(1000)] + [b"y" * (TAIL_CHUNK + 7) + b"\n"]
    path.write_bytes(b"".join(lines) + torn)
    assert list(whole_lines(path)) == lines
    cut_torn_line(path)
    assert path.read_bytes() == b"".join(lines)


def test_a_file_of_one_torn_line_is_cut_to_nothing(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"z" * (2 * TAIL_CHUNK))
    assert list(whole_lines(path)) == []
    cut_torn_line(path)
    assert path.read_bytes() == b""
