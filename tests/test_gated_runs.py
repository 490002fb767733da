"""Gated runs (SPEC §21) over real HTTP against the fake server, through the CLI (real
processes; kill -9 really kills): N kept rows, the rejected file, no request for a
candidate past the gate that rejected it, the same output at any concurrency and after a
kill, the candidates cap."""

from __future__ import annotations

import hashlib
import json
import math
import re
import signal
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from support import cli_here, start_cli, wait_for_rows, write

from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.providers.response_cache import DB_NAME
from genwire.testing import FakeOpenAIServer

N = 30
DESIGNED_RATE = 0.5 * 0.4  # n even (half), score >= 4 (two scores of five)
JUDGE_SCHEMA = {"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]}


def score(prompt: str) -> str:
    """The judge's answer: a score 1-5 of its own for every prompt."""
    return json.dumps({"score": int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % 5 + 1})


def judged(server: FakeOpenAIServer, root: Path, n: int = N, **extra: Any) -> dict[str, Any]:
    """``n → keep-if (n even) → question → verdict (judge) → keep-if (score >= 4)``."""
    server.answer_with("judge", score)
    columns = [
        {"name": "n", "generator": "sampler", "params": {"kind": "uniform", "low": 0, "high": 10**9, "integer": True}},
        {"name": "even", "generator": "keep-if", "params": {"expression": "n % 2 == 0"}},
        {
            "name": "question",
            "generator": "llm-text",
            "resources": {"model": "writer"},
            "params": {"prompt": "Question about {{ n }}"},
        },
        {
            "name": "verdict",
            "generator": "llm-structured",
            "resources": {"model": "judge"},
            "params": {"prompt": "Judge: {{ question }}", "schema": JUDGE_SCHEMA},
        },
        {"name": "good", "generator": "keep-if", "params": {"expression": "verdict.score >= 4"}},
    ]
    return {
        "providers": {
            "srv": {"kind": "openai", "base_url": server.url, "api_key": "k", "max_concurrency": 4, "retries": 1}
        },
        "models": {
            "writer": {"provider": "srv", "model": "writer", "kind": "chat"},
            "judge": {"provider": "srv", "model": "judge", "kind": "chat"},
        },
        "pipeline": {
            "num_records": n,
            "seed": 5,
            "batch_size": 8,
            "output": str(root / "out.jsonl"),
            "columns": columns,
            **extra,
        },
    }


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def asked(server: FakeOpenAIServer, model: str = "writer") -> list[int]:
    """The ``n`` of every question the writer was asked (probes left out)."""
    found = []
    for name, body in server.bodies:
        match = re.fullmatch(r"Question about (\d+)", body["messages"][-1]["content"]) if name == model else None
        if match:
            found.append(int(match.group(1)))
    return found


def test_a_judged_pipeline_keeps_exactly_n_rows_and_sends_nothing_past_a_rejecting_gate(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        config = write(judged(server, tmp_path), tmp_path / "genwire.yaml")
        result = cli_here("run", config, "--json")
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)

        rows = lines(tmp_path / "out.jsonl")
        assert len(rows) == N
        assert all(set(r) == {"n", "question", "verdict"} for r in rows)  # gate columns are not written
        assert all(r["n"] % 2 == 0 and r["verdict"]["score"] >= 4 for r in rows)

        rejected = lines(tmp_path / "out.jsonl.rejected.jsonl")
        candidates = N + len(rejected)
        assert summary["candidates"] == candidates and summary["rows_written"] == N
        assert sorted(r["candidate"] for r in rejected) == [r["candidate"] for r in rejected]
        for record in rejected:
            assert set(record) == {"candidate", "gate", "reason", "row"}
            if record["gate"] == "even":
                assert record["row"]["n"] % 2 == 1 and set(record["row"]) == {"n"}
                assert record["reason"] == "n % 2 == 0 is false"
            elif record["gate"] == "good":
                assert record["row"]["verdict"]["score"] < 4 and record["reason"] == "verdict.score >= 4 is false"
            else:
                assert record["gate"] is None and record["reason"] == "surplus"
                assert record["row"]["n"] % 2 == 0 and record["row"]["verdict"]["score"] >= 4
        by_gate = {g: sum(r["gate"] == g for r in rejected) for g in ("even", "good")}
        assert summary["rejected"] == by_gate
        # The candidates the first gate rejected were never asked anything; every other was
        # asked once by the writer and once by the judge.
        passed_even = N + by_gate["good"] + summary["surplus"]
        questions = asked(server)
        assert len(questions) == len(set(questions)) == passed_even
        assert all(n % 2 == 0 for n in questions)
        assert server.requests["judge"] == passed_even + 1  # + its pre-flight probe
        # Scheduled from the measured rate: not far past what the rate needs.
        assert candidates <= 2 * N / DESIGNED_RATE
        page = (tmp_path / "out.jsonl.report.html").read_text(encoding="utf-8")
        assert f'data-funnel="candidates">{candidates}<' in page
        assert f'data-funnel="kept">{N}<' in page
        assert f'data-rejected="even">{by_gate["even"]}<' in page and "n % 2 == 0 is false" in page
        samples = page[page.index("<h2>Sample rows</h2>") :]
        assert "<th>question</th>" in samples and "<th>even</th>" not in samples  # no gate column shown
        human = cli_here("run", config, "--fresh", "--no-response-cache")
        assert "candidates" in human.stdout and "→ even" in human.stdout and "30 kept" in human.stdout


def unique_words(server: FakeOpenAIServer, root: Path, concurrency: int) -> dict[str, Any]:
    """``word`` (12 values) → ``echo`` (the writer repeats it) → keep-unique(echo): duplicates galore."""
    server.answer_with("writer", lambda prompt: prompt.rsplit(" ", 1)[-1])
    return {
        "providers": {"srv": {"kind": "openai", "base_url": server.url, "max_concurrency": concurrency}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "cache": {"enabled": False},
        "pipeline": {
            "num_records": 10,
            "seed": 11,
            "batch_size": 2,
            "output": str(root / "out.jsonl"),
            "columns": [
                {
                    "name": "word",
                    "generator": "sampler",
                    "params": {"kind": "category", "values": [f"w{i}" for i in range(12)]},
                },
                {
                    "name": "echo",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "Say {{ word }}"},
                },
                {"name": "first", "generator": "keep-unique", "params": {"column": "echo"}},
            ],
        },
    }


def test_keep_unique_gives_the_same_rows_at_any_concurrency(tmp_path: Path) -> None:
    outputs = []
    with FakeOpenAIServer(latency=0.005) as server:
        for concurrency in (1, 32):
            root = tmp_path / str(concurrency)
            config = write(unique_words(server, root, concurrency), root / "genwire.yaml")
            result = cli_here("run", config)
            assert result.returncode == 0, result.stderr
            rejected = lines(root / "out.jsonl.rejected.jsonl")
            outputs.append(((root / "out.jsonl").read_text(), up_to_last_kept(rejected, 10)))
    # The same rows, and the same rejections up to the last row kept (past it, how many
    # candidates were in flight when the tenth was kept depends on timing: surplus).
    assert outputs[0] == outputs[1]
    rows = [json.loads(line) for line in outputs[0][0].splitlines()]
    assert len({r["echo"] for r in rows}) == len(rows) == 10
    assert any(r["gate"] == "first" for r in outputs[0][1])


def up_to_last_kept(rejected: list[dict[str, Any]], kept: int) -> list[dict[str, Any]]:
    """The rejected records of candidates below the last one in the output."""
    taken = {r["candidate"] for r in rejected}
    last, seen = -1, 0
    while seen < kept:
        last += 1
        seen += last not in taken
    return [r for r in rejected if r["candidate"] < last]


def stored_questions(cache: Path) -> set[int]:
    """The ``n`` of every writer answer in the response cache (the fake server answers
    "answer to: <prompt>"), read from its SQLite file as the killed run left it."""
    with closing(sqlite3.connect(cache / DB_NAME)) as db:
        answers = [json.loads(a) for (a,) in db.execute("SELECT answer FROM answers WHERE col = 'question'")]
    return {int(re.fullmatch(r"answer to: Question about (\d+)", a).group(1)) for a in answers}  # type: ignore[union-attr]


def with_unique_words(cfg: dict[str, Any]) -> dict[str, Any]:
    """A ``word`` column, and keep-unique on it last: an in-order gate must remember, on
    resume, the words an earlier session kept."""
    columns = cfg["pipeline"]["columns"]
    words = {"kind": "category", "values": [f"w{i}" for i in range(400)]}
    columns.insert(1, {"name": "word", "generator": "sampler", "params": words})
    columns.append({"name": "new_word", "generator": "keep-unique", "params": {"column": "word"}})
    return cfg


def test_kill_9_at_half_then_rerun_gives_the_uninterrupted_rows_asking_again_only_what_was_in_flight(
    tmp_path: Path,
) -> None:
    wanted = 120
    with FakeOpenAIServer(latency=0.01) as server:
        cfg = with_unique_words(judged(server, tmp_path, n=wanted))
        config = write(cfg, tmp_path / "genwire.yaml")
        directory = checkpoint_dir(tmp_path / "out.jsonl")
        proc = start_cli("run", config)
        wait_for_rows(directory, wanted // 2, proc)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
        assert not (tmp_path / "out.jsonl").exists()
        server.wait_idle()
        before = asked(server)
        stored = stored_questions(tmp_path / ".genwire" / "cache")
        # Every row the checkpoint holds had its question stored first (a batch's answers go
        # to the response cache column by column, before the batch is checkpointed).
        assert len(stored) >= wanted // 2 and stored <= set(before)
        server.reset_stats()

        again = cli_here("run", config)
        assert again.returncode == 0, again.stderr
        after = asked(server)
        # What genwire had stored at the kill is never asked again; asked again are only
        # questions answered (or on the wire) after their batch's last write: in flight.
        assert not stored & set(after)
        resumed = (tmp_path / "out.jsonl").read_text(encoding="utf-8")

        ref = tmp_path / "reference"
        reference = cli_here("run", write(cfg, ref / "genwire.yaml"), "-o", ref / "out.jsonl")
        assert reference.returncode == 0, reference.stderr
    assert resumed == (ref / "out.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in resumed.splitlines()]
    assert len(rows) == wanted and len({r["word"] for r in rows}) == wanted


def test_the_candidates_cap_stops_with_exit_3_and_a_higher_cap_goes_on_asking_nothing_again(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = judged(server, tmp_path, max_candidates=40)
        config = write(cfg, tmp_path / "genwire.yaml")
        stopped = cli_here("run", config, "--json")
        assert stopped.returncode == 3, stopped.stderr
        figures = json.loads(stopped.stdout)
        assert figures["ok"] is False and figures["wanted"] == N and figures["candidates"] == 40
        assert 0 < figures["kept"] < N and figures["rate"] == figures["kept"] / 40
        assert "max_candidates" in stopped.stderr and "rerun the same command" in stopped.stderr
        first = asked(server)
        server.reset_stats()

        cfg["pipeline"]["max_candidates"] = 400  # not in the fingerprint: the same checkpoint goes on
        again = cli_here("run", write(cfg, config), "--json")
        assert again.returncode == 0, again.stderr
        assert not set(first) & set(asked(server))
        assert json.loads(again.stdout)["rows_written"] == N

        ref = tmp_path / "reference"
        reference = cli_here("run", write(cfg, ref / "genwire.yaml"), "-o", ref / "out.jsonl")
        assert reference.returncode == 0, reference.stderr
    assert (tmp_path / "out.jsonl").read_text() == (ref / "out.jsonl").read_text()
    ours, theirs = (lines(root / "out.jsonl.rejected.jsonl") for root in (tmp_path, ref))
    assert up_to_last_kept(ours, N) == up_to_last_kept(theirs, N)


def quarter(server: FakeOpenAIServer, root: Path, n: int) -> dict[str, Any]:
    """``n`` → ``question`` (asked for every candidate) → keep-if(n % 4 == 0): a 25 % gate."""
    cfg = judged(server, root, n=n)
    columns = cfg["pipeline"]["columns"]
    cfg["pipeline"]["columns"] = [
        columns[0],
        columns[2],
        {"name": "fourth", "generator": "keep-if", "params": {"expression": "n % 4 == 0"}},
    ]
    cfg["models"] = {"writer": {**cfg["models"]["writer"], "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}}
    return cfg


def test_the_estimate_projects_the_candidates_a_run_needs_and_keeps_its_own(tmp_path: Path) -> None:
    wanted = 100
    with FakeOpenAIServer() as server:
        config = write(quarter(server, tmp_path, wanted), tmp_path / "genwire.yaml")
        estimate = cli_here("estimate", config, "-k", "60", "--json")
        assert estimate.returncode == 0, estimate.stderr
        found = json.loads(estimate.stdout)
        acceptance = found["acceptance"]
        assert acceptance["low"] <= acceptance["rate"] <= acceptance["high"]
        assert set(acceptance["by_gate"]) == {"fourth"}
        projected = found["candidates_needed"]["expected"]
        assert projected == math.ceil(wanted / acceptance["rate"])
        assert found["candidates_needed"]["pessimistic"] >= projected
        assert found["gates"]["cost_per_kept_row_usd"] > 0
        sampled = asked(server)
        assert len(sampled) == 60
        server.reset_stats()

        run = cli_here("run", config, "--json")
        assert run.returncode == 0, run.stderr
        summary = json.loads(run.stdout)
        assert summary["rows_written"] == wanted
        assert abs(summary["candidates"] - projected) <= 0.5 * projected
        assert not set(sampled) & set(asked(server))  # the estimate's candidates are the run's first
        human = cli_here("estimate", write(quarter(server, tmp_path / "again", wanted), tmp_path / "again" / "g.yaml"))
        assert "acceptance:" in human.stdout and "candidates for 100 kept rows" in human.stdout


def test_the_estimate_warns_when_too_few_candidates_were_kept(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        config = write(quarter(server, tmp_path, 50), tmp_path / "genwire.yaml")
        estimate = cli_here("estimate", config, "-k", "8", "--json")
        assert estimate.returncode == 0, estimate.stderr
        assert "weak projection" in estimate.stderr


def test_max_cost_stops_a_gated_run_with_its_figures_and_a_higher_cap_finishes_it(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = judged(server, tmp_path)
        for model in cfg["models"].values():
            model["price"] = {"input_per_mtok": 1000, "output_per_mtok": 1000}
            model["params"] = {"max_tokens": 20}
        config = write(cfg, tmp_path / "genwire.yaml")
        stopped = cli_here("run", config, "--json", "--skip-preflight", "--max-cost", "0.5")
        assert stopped.returncode == 3, stopped.stderr
        figures = json.loads(stopped.stdout)
        assert figures["wanted"] == N and 0 < figures["kept"] < N and figures["spent_usd"] <= 0.5
        assert f"{figures['kept']} of {N} rows kept from {figures['candidates']} candidates" in stopped.stderr
        first = asked(server)
        again = cli_here("run", config, "--json", "--skip-preflight", "--max-cost", "50")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["rows_written"] == N
    assert not set(first) & set(asked(server)[len(first) :])  # nothing kept was asked again


def test_an_unchanged_gated_rerun_pays_nothing_and_writes_the_same_files(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = judged(server, tmp_path)
        cfg["models"]["embedder"] = {"provider": "srv", "model": "embedder", "kind": "embedding"}
        novel = {"name": "novel", "generator": "keep-novel", "resources": {"model": "embedder"}}
        cfg["pipeline"]["columns"].insert(3, {**novel, "params": {"column": "question"}})
        config = write(cfg, tmp_path / "genwire.yaml")
        first = cli_here("run", config)
        assert first.returncode == 0, first.stderr
        out = (tmp_path / "out.jsonl").read_text()
        rejected = lines(tmp_path / "out.jsonl.rejected.jsonl")
        asked_first = asked(server)
        server.reset_stats()
        again = cli_here("run", config, "--fresh")
        assert again.returncode == 0, again.stderr
        # Every answer the first run had, the gate's embeddings included, came from the
        # response cache: a request went out only for a candidate the first run never
        # reached (past its last kept row, how far the schedule ran ahead depends on timing).
        assert not set(asked_first) & set(asked(server))
        assert server.requests["embedder"] <= 1 + server.requests["writer"] - 1
    assert (tmp_path / "out.jsonl").read_text() == out
    assert up_to_last_kept(lines(tmp_path / "out.jsonl.rejected.jsonl"), N) == up_to_last_kept(rejected, N)


def few_words_judged(server: FakeOpenAIServer, root: Path) -> Path:
    """``word`` (5 values) → keep-unique(word) → ``judged`` (the writer): N = 5, so every
    word must be kept once, and a candidate that fails after keep-unique holds its word."""
    cfg = unique_words(server, root, concurrency=2)
    cfg["pipeline"].update(num_records=5, seed=3, batch_size=4)
    cfg["pipeline"]["columns"] = [
        {"name": "word", "generator": "sampler", "params": {"kind": "category", "values": [f"w{i}" for i in range(5)]}},
        {"name": "once", "generator": "keep-unique", "params": {"column": "word"}},
        {
            "name": "judged",
            "generator": "llm-text",
            "resources": {"model": "writer"},
            "params": {"prompt": "Judge {{ word }}"},
        },
    ]
    return write(cfg, root / "genwire.yaml")


def test_a_transient_failure_after_keep_unique_is_retried_before_the_cap(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        config = few_words_judged(server, tmp_path)
        server.script("writer", [400])  # the first candidate's judge: a 400 (never retried), once
        result = cli_here("run", config, "--skip-preflight")
        assert result.returncode == 0, result.stderr
        rows = lines(tmp_path / "out.jsonl")
        assert sorted(r["word"] for r in rows) == [f"w{i}" for i in range(5)]
        assert not (tmp_path / "out.jsonl.errors.jsonl").exists()


def test_a_uniqueness_gate_that_has_seen_every_value_says_so_at_the_cap(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        config = few_words_judged(server, tmp_path)
        server.fail_when("writer", "Judge w3", 400)  # w3 fails for good: 4 rows at most
        result = cli_here("run", config, "--skip-preflight")
        assert result.returncode == 3, result.stderr
        message = " ".join(result.stderr.split())
        assert "has seen every value column 'word' can take (5), so a higher cap cannot help" in message, message
        assert "raise pipeline.max_candidates" not in message
        assert "candidates that failed hold some of them" in message
        # w3's first candidate asked twice (the retry), later ones rejected by keep-unique
        assert sum(body["messages"][-1]["content"] == "Judge w3" for _, body in server.bodies) == 2
