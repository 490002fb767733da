"""The failure-rate stop stops sending at once (issue 49 item 10): with a 400 on every row
a run sends at most the minimum sample plus one provider's worth of requests, its unsent
rows are dropped for the rerun (never failed), and a healthy run is not stopped. Real
HTTP against the fake server, which counts the requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import cli, write

import genwire
from genwire.engine.rows.failure_stop import MIN_ROWS_FOR_RATE, FailureStop
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_server import FakeResponse

CONCURRENCY = 16
ANSWER = {
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}


def config(server: FakeOpenAIServer, root: Path, n: int, *, columns: int = 1) -> dict[str, Any]:
    said = [{"name": "i", "generator": "sampler", "params": {"kind": "uuid"}}]
    asked = [
        {
            "name": f"c{k}",
            "generator": "llm-text",
            "resources": {"model": "writer"},
            "params": {"prompt": f"Say {{{{ i }}}} ({k})"},
        }
        for k in range(columns)
    ]
    provider = {"kind": "openai", "base_url": server.url, "max_concurrency": CONCURRENCY, "retries": 0}
    return {
        "providers": {"srv": provider},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "cache": {"enabled": False},
        "pipeline": {
            "num_records": n,
            "batch_size": 64,
            "max_failure_rate": 0.1,
            "output": str(root / "out.jsonl"),
            "columns": said + asked,
        },
    }


async def run(cfg: dict[str, Any], **kwargs: Any) -> Any:
    async with genwire.boot(cfg) as container:
        return await container.run(**kwargs)


@pytest.fixture
def server() -> Any:
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.mark.parametrize("columns", [1, 2])
async def test_a_400_on_every_row_stops_sending_within_the_sample_and_one_round(
    server: FakeOpenAIServer, tmp_path: Path, columns: int
) -> None:
    server.fail_when("writer", "", 400)
    cfg = config(server, tmp_path, 1000, columns=columns)
    with pytest.raises(genwire.RunError, match=r"stopped after \d+ rows: \d+ failed \(100%\), above max_failure_rate"):
        await run(cfg, skip_preflight=True)
    server.wait_idle()
    # Judged on whole batches in row order it was 330 (eight batches' rows mixed at the gate).
    assert server.requests["writer"] <= MIN_ROWS_FOR_RATE + CONCURRENCY
    failed = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
    assert len(failed) == server.requests["writer"]  # a row the run never sent is not failed: dropped

    server.clear()  # the fault clears: the rerun makes every row, the dropped ones too
    result = await run(cfg, skip_preflight=True)
    assert result.rows_written == 1000 and result.rows_failed == 0


async def test_scattered_failures_below_the_rate_do_not_stop_the_run(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.fail_rate("writer", 0.03, (400,), seed=1)
    result = await run(config(server, tmp_path, 640), skip_preflight=True)
    assert result.rows_written + result.rows_failed == 640
    assert 0 < result.rows_failed < 64


async def test_failures_that_pass_the_rate_late_stop_the_run_without_failing_unsent_rows(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Rows answered first, then every request refused: the stop comes once the failed
    share of the rows seen passes the rate, and the rows left unsent stay for the rerun."""
    server.script("writer", [FakeResponse(json=ANSWER)] * 100)
    server.fail_when("writer", "", 400)
    with pytest.raises(genwire.RunError, match="above max_failure_rate") as info:
        await run(config(server, tmp_path, 2000), skip_preflight=True)
    assert "rows are kept" in str(info.value)
    server.wait_idle()
    failed = (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()
    assert len(failed) + 100 == server.requests["writer"] < 2000 // 4


async def test_a_paced_provider_stops_at_once_too(server: FakeOpenAIServer, tmp_path: Path) -> None:
    """Rows queued for a paced turn are refused before they take one: the run ends after
    the sample, not after every queued row waited out its turn (1,000 rows at 1,200 a minute)."""
    server.fail_when("writer", "", 400)
    cfg = config(server, tmp_path, 1000)
    cfg["providers"]["srv"]["rate_limit"] = {"requests_per_minute": 1200}
    with pytest.raises(genwire.RunError, match="above max_failure_rate"):
        await run(cfg, skip_preflight=True)
    server.wait_idle()
    assert server.requests["writer"] <= MIN_ROWS_FOR_RATE + CONCURRENCY


def test_the_cli_says_the_same_and_exits_1(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.fail_when("writer", "", 400)
    done = cli("run", write(config(server, tmp_path, 500), tmp_path / "genwire.yaml"), "--skip-preflight")
    assert done.returncode == 1, done.stderr
    assert "above max_failure_rate 10%" in done.stderr + done.stdout
    assert "rerun the same command to resume" in done.stderr + done.stdout
    server.wait_idle()
    assert server.requests["writer"] <= MIN_ROWS_FOR_RATE + CONCURRENCY


def trip_once_written(monkeypatch: pytest.MonkeyPatch, rows: int = 128) -> list[bool]:
    """The live rule forced to trip at the first failure once ``rows`` rows are written
    (once): the list it returns says whether it did."""
    tripped: list[bool] = []

    def once(self: FailureStop) -> bool:
        if tripped or self.done + self.lost < rows:
            return False
        tripped.append(True)
        return True

    monkeypatch.setattr(FailureStop, "live_above", once)
    return tripped


async def test_a_stop_the_written_rows_do_not_confirm_sends_the_dropped_rows_and_finishes(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows decided with no request after the stop (answers from the cache) can bring the
    written rows back under the rate: the run then goes on, making each dropped row once.
    The stop is forced here (once 128 rows are written); the rows are real."""
    tripped = trip_once_written(monkeypatch)
    server.fail_rate("writer", 0.03, (400,), seed=1)
    result = await run(config(server, tmp_path, 640), skip_preflight=True)
    assert tripped and result.rows_written + result.rows_failed == 640
    assert server.requests["writer"] == 640  # each row sent once: the dropped ones after the stop
    assert result.rows_failed == len((tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines())


def gated(cfg: dict[str, Any], expression: str = "c0|length > 0") -> dict[str, Any]:
    """``cfg`` with a gate after its chat columns: ``num_records`` then counts kept rows."""
    gate = {"name": "good", "generator": "keep-if", "params": {"expression": expression}}
    cfg["pipeline"]["columns"].append(gate)
    return cfg


async def test_a_gated_run_with_a_400_on_every_row_stops_sending_within_the_sample_and_one_round(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Judged on whole batches it sent every candidate of its first window (a gated run
    starts one per row wanted: 1,000) before the first batch was judged."""
    server.fail_when("writer", "", 400)
    cfg = gated(config(server, tmp_path, 1000))
    with pytest.raises(genwire.RunError, match=r"stopped after \d+ rows: \d+ failed \(100%\), above max_failure_rate"):
        await run(cfg, skip_preflight=True)
    server.wait_idle()
    assert server.requests["writer"] <= MIN_ROWS_FOR_RATE + CONCURRENCY
    failed = (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()
    assert len(failed) == server.requests["writer"]  # the candidates never sent are not failed: dropped

    server.clear()  # the fault clears: the rerun keeps the rows wanted
    result = await run(cfg, skip_preflight=True)
    assert result.rows_written == 1000 and result.rows_failed == 0


async def test_a_gated_run_with_scattered_failures_finishes(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.fail_rate("writer", 0.03, (400,), seed=1)
    result = await run(gated(config(server, tmp_path, 640)), skip_preflight=True)
    assert result.rows_written == 640
    assert 0 < result.rows_failed < 64


@pytest.mark.parametrize("with_gate", [False, True])
async def test_a_stop_the_written_rows_do_not_confirm_makes_the_dropped_rows_in_order(
    server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_gate: bool
) -> None:
    """After a stop the written rows do not confirm, the dropped rows (below rows already
    written) are made in a checkpoint segment of their own: the output is the one a run
    without the stop writes, row for row, in order; a gated run takes its dropped
    candidates first, so it keeps the same candidates."""

    def shape(root: Path) -> dict[str, Any]:
        cfg = config(server, root, 640)
        cfg["pipeline"].update(seed=7, max_failure_rate=0.3)
        return gated(cfg, "'77' not in i") if with_gate else cfg

    server.fail_when("writer", "ab", 400)  # about 12 % of the rows, the same ones in every run
    clean = tmp_path / "clean"
    await run(shape(clean), skip_preflight=True)

    tripped = trip_once_written(monkeypatch)
    refused: list[tuple[int, ...]] = []
    sent = FailureStop.sent

    def counted(self: FailureStop, rows: tuple[int, ...]) -> bool:
        admitted = sent(self, rows)
        if not admitted:
            refused.append(rows)
        return admitted

    monkeypatch.setattr(FailureStop, "sent", counted)
    server.set_latency("writer", 0.01)  # rows of the running batches wait for a slot as the stop comes
    stopped = tmp_path / "stopped"
    await run(shape(stopped), skip_preflight=True)
    assert tripped and refused  # rows were dropped, then made after the rows written past them
    same = (stopped / "out.jsonl").read_text().splitlines()
    assert same == (clean / "out.jsonl").read_text().splitlines()


async def test_batch_mode_puts_no_call_in_a_round_once_the_rate_passed(tmp_path: Path) -> None:
    """Batch mode (SPEC §14): a round's file is sent whole, so its requests are all paid
    before one fails; but once a round's answers pass the rate, the next round is not
    submitted (three dependent columns, half the rows refused at the second: two batches,
    where judging written rows submitted the third for the other half)."""
    with FakeOpenAIServer() as server:
        server.fail_when("writer", "Second about x", 400)
        cfg = config(server, tmp_path, 60, columns=0)
        cfg["providers"]["srv"]["batch"] = {"poll_interval_s": 0.05}
        cfg["pipeline"]["batch_size"] = 8
        cfg["pipeline"]["columns"] += [
            {"name": "topic", "generator": "sampler", "params": {"kind": "category", "values": ["x", "y"]}},
            {
                "name": "first",
                "generator": "llm-text",
                "resources": {"model": "writer"},
                "params": {"prompt": "First {{ i }}"},
            },
            {
                "name": "second",
                "generator": "llm-text",
                "resources": {"model": "writer"},
                "params": {"prompt": "Second about {{ topic }}: {{ first }}"},
            },
            {
                "name": "third",
                "generator": "llm-text",
                "resources": {"model": "writer"},
                "params": {"prompt": "Third {{ second }}"},
            },
        ]
        with pytest.raises(genwire.RunError, match="above max_failure_rate"):
            await run(cfg, skip_preflight=True, batch=True)
        assert server.batches.created == 2  # the first two columns' rounds; none for the third
