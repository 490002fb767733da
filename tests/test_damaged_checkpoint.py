"""A damaged checkpoint (SPEC §9): a line that cannot be read, or a file that does not
belong, is one warning naming the file and line; only the rows it held are generated
again, every other kept row is used, and the output is what an undamaged run writes.

Each case: a run kept all 20 rows in its checkpoint and stopped; one line is damaged;
``genwire run`` again (a real process, against the fake server, without the response
cache so every regenerated row is a request) must ask for exactly the damaged rows."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import StopAfter, cli, write

import genwire
from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.testing import FakeOpenAIServer

N = 20
BATCH = 5
LINE = 8  # the damaged line (1-based); it holds row index 7


def pipeline(server: FakeOpenAIServer, out: Path) -> dict[str, Any]:
    return {
        "providers": {"srv": {"kind": "openai", "base_url": server.url, "api_key": "k", "backoff_s": 0.01}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "pipeline": {
            "num_records": N,
            "seed": 11,
            "batch_size": BATCH,
            "output": str(out),
            "columns": [
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {
                    "name": "q",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "Question {{ uid }}"},
                },
            ],
        },
    }


def replace_line(segment: Path, number: int, make: Callable[[bytes], bytes]) -> None:
    lines = segment.read_bytes().splitlines(keepends=True)
    lines[number - 1] = make(lines[number - 1])
    segment.write_bytes(b"".join(lines))


def with_index(index: Any) -> Callable[[bytes], bytes]:
    def make(line: bytes) -> bytes:
        record = json.loads(line)
        record["i"] = index
        return json.dumps(record).encode() + b"\n"

    return make


def without_index(line: bytes) -> bytes:
    record = json.loads(line)
    del record["i"]
    return json.dumps(record).encode() + b"\n"


def swap_with_next(segment: Path, number: int) -> None:
    lines = segment.read_bytes().splitlines(keepends=True)
    lines[number - 1], lines[number] = lines[number], lines[number - 1]
    segment.write_bytes(b"".join(lines))


def stray_copy(segment: Path, number: int) -> None:
    # Looks like a segment, is not one (a user's backup, an editor's copy).
    line = segment.read_bytes().splitlines(keepends=True)[number - 1]
    (segment.parent / "rows-abc.jsonl").write_bytes(line.replace(b'"i": 7', b'"i": 70'))


def on_line(make: Callable[[bytes], bytes]) -> Callable[[Path, int], None]:
    return lambda segment, number: replace_line(segment, number, make)


# case id -> (damage, rows generated again, what the warning names)
CASES: dict[str, tuple[Callable[[Path, int], None], set[int], str]] = {
    "garbled": (on_line(lambda line: line[: len(line) // 2] + b"\n"), {7}, "line 8"),
    "nul-filled": (on_line(lambda line: b"\0" * (len(line) - 1) + b"\n"), {7}, "line 8"),
    "bad-utf8": (on_line(lambda line: line[:10] + b"\xff\xfe" + line[12:]), {7}, "line 8"),
    "empty-object": (on_line(lambda line: b"{}\n"), {7}, "line 8"),
    "blank": (on_line(lambda line: b"\n"), {7}, "line 8"),
    "no-index": (on_line(without_index), {7}, "line 8"),
    "index-out-of-range": (on_line(with_index(N + 5)), {7}, "line 8"),
    "index-negative": (on_line(with_index(-1)), {7}, "line 8"),
    "index-not-int": (on_line(with_index("7")), {7}, "line 8"),
    "index-float": (on_line(with_index(7.0)), {7}, "line 8"),
    "index-bool": (on_line(with_index(True)), {7}, "line 8"),
    # Two lines claim row 3: which one is right is unknown, so both rows are asked again.
    "index-duplicate": (on_line(with_index(3)), {3, 7}, "line 8"),
    # Row 8 written before row 7: the later one is out of order.
    "lines-swapped": (swap_with_next, {7}, "line 9"),
    "row-not-object": (on_line(lambda line: b'{"i": 7, "row": [1, 2]}\n'), {7}, "line 8"),
    "stray-file": (stray_copy, set(), "rows-abc.jsonl"),
}


@pytest.fixture(scope="module")
def undamaged_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    """What an undamaged run of the pipeline writes: one run for every case (the rows depend
    on the seed and the prompts, not on which fake server answered them)."""
    root = tmp_path_factory.mktemp("reference")
    with FakeOpenAIServer() as server:
        reference = root / "reference.jsonl"
        done = cli("run", write(pipeline(server, reference), root / "reference.yaml"), "--no-response-cache")
    assert done.returncode == 0, done.stderr
    return reference.read_text(encoding="utf-8")


@pytest.mark.parametrize("case", list(CASES))
async def test_a_damaged_checkpoint_line_regenerates_only_its_rows(
    tmp_path: Path, case: str, undamaged_output: str
) -> None:
    damage, again, named = CASES[case]
    with FakeOpenAIServer() as server:
        expected = undamaged_output
        prompts = [f"Question {json.loads(line)['uid']}" for line in expected.splitlines()]

        out = tmp_path / "out.jsonl"
        cfg = pipeline(server, out)
        async with genwire.boot(cfg) as container:  # run 1: every row kept, then a crash
            with pytest.raises(StopAfter.Stop):
                await container.run(progress=StopAfter(N // BATCH), response_cache=False)
        segment = checkpoint_dir(out) / "rows-0001.jsonl"
        assert len(segment.read_bytes().splitlines()) == N
        damage(segment, LINE)

        server.reset_stats()
        second = cli("run", write(cfg, tmp_path / "genwire.yaml"), "--no-response-cache")
        assert second.returncode == 0, second.stderr
        assert "Traceback" not in second.stderr
        warnings = [line for line in second.stderr.splitlines() if named in line]
        assert len(warnings) == 1, second.stderr
        assert "rows-abc.jsonl" in warnings[0] or "rows-0001.jsonl" in warnings[0]
        sent = sorted(body["messages"][-1]["content"] for _, body in server.bodies)
        asked = [p for p in sent if p.startswith("Question ")]
        assert asked == sorted(prompts[i] for i in again)
        assert len(sent) - len(asked) <= 1  # the pre-flight probe
        assert out.read_text(encoding="utf-8") == expected
        assert not checkpoint_dir(out).exists()


async def test_a_damaged_line_is_warned_about_once_then_cut(tmp_path: Path) -> None:
    """The bad line leaves its file when the checkpoint is opened: a second interrupted
    session does not warn about it again, and rows stay in order for the final merge."""
    with FakeOpenAIServer() as server:
        out = tmp_path / "out.jsonl"
        cfg = pipeline(server, out)
        async with genwire.boot(cfg) as container:
            with pytest.raises(StopAfter.Stop):
                await container.run(progress=StopAfter(2), response_cache=False)
        segment = checkpoint_dir(out) / "rows-0001.jsonl"
        replace_line(segment, 3, lambda line: b"\0\0\0\n")
        async with genwire.boot(cfg) as container:
            with pytest.raises(StopAfter.Stop):
                await container.run(progress=StopAfter(1), response_cache=False)
        assert len(segment.read_bytes().splitlines()) == 2 * BATCH - 1
        assert b"\0" not in segment.read_bytes()


async def test_rows_without_their_fingerprint_are_refused_and_fresh_clears_a_stray_folder(tmp_path: Path) -> None:
    """meta.json is written before any row: rows without it come from an unknown config."""
    with FakeOpenAIServer() as server:
        out = tmp_path / "out.jsonl"
        cfg = pipeline(server, out)
        async with genwire.boot(cfg) as container:
            with pytest.raises(StopAfter.Stop):
                await container.run(progress=StopAfter(1), response_cache=False)
        directory = checkpoint_dir(out)
        (directory / "meta.json").unlink()
        (directory / "notes").mkdir()
        config = write(cfg, tmp_path / "genwire.yaml")
        refused = cli("run", config)
        assert refused.returncode == 2, refused.stderr
        assert "no meta.json" in refused.stderr and "--fresh" in refused.stderr
        fresh = cli("run", config, "--fresh")
        assert fresh.returncode == 0, fresh.stderr
        assert len(out.read_text(encoding="utf-8").splitlines()) == N
