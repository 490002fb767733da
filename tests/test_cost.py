"""What a run will cost, a budget it never exceeds, and what it did cost (SPEC §16):
prices, ``genwire estimate``, ``run --max-cost`` (exit 3), the ledger in the checkpoint
(kill -9 too), over real HTTP against the fake server with realistic ``usage``."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from support import cli_here, start_cli, write

from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.engine.records.ledger import LEDGER_NAME, RunLedger
from genwire.providers.budget import CostMeter, Paid
from genwire.providers.pricing import Price
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_openai.usage import RealisticUsage

PRICES = {"writer": (0.15, 0.60), "embedder": (0.02, 0.0)}  # USD per million tokens
MAX_TOKENS = 120


def pipeline(server: FakeOpenAIServer, root: Path, n: int, *, concurrency: int = 8, **extra: Any) -> dict[str, Any]:
    """Two chat columns (the second reads the first) and an embedding column, prompts of
    varying length: the pipeline of SPEC §16's done-means, small."""
    models: dict[str, Any] = {
        "writer": {"provider": "srv", "model": "writer", "kind": "chat", "params": {"max_tokens": MAX_TOKENS}},
        "embedder": {"provider": "srv", "model": "embedder", "kind": "embedding"},
    }
    for alias, (inp, out) in PRICES.items():
        models[alias]["price"] = {"input_per_mtok": inp, "output_per_mtok": out}
    return {
        "providers": {"srv": {"kind": "openai", "base_url": server.url, "max_concurrency": concurrency}},
        "models": models,
        "defaults": {"chat_model": "writer", "embedding_model": "embedder"},
        "pipeline": {
            "num_records": n,
            "seed": 3,
            "batch_size": 8,
            "max_failure_rate": 0.0,
            "output": str(root / "out.jsonl"),
            "columns": [
                {
                    "name": "n",
                    "generator": "sampler",
                    "params": {"kind": "uniform", "low": 1, "high": 60, "integer": True},
                },
                {"name": "q", "generator": "llm-text", "params": {"prompt": "Ask about {{ 'lorem ipsum ' * n }}"}},
                {"name": "a", "generator": "llm-text", "params": {"prompt": "Answer: {{ q }}"}},
                {"name": "e", "generator": "embedding", "params": {"column": "a"}},
            ],
            **extra,
        },
    }


def server_usd(server: FakeOpenAIServer) -> float:
    return sum(
        server.prompt_tokens[m] * PRICES[m][0] / 1e6 + server.completion_tokens[m] * PRICES[m][1] / 1e6 for m in PRICES
    )


@pytest.fixture
def server() -> Any:
    with FakeOpenAIServer(latency=0.01) as srv:
        srv.realistic_usage("*", RealisticUsage(seed=5))
        yield srv


def run_json(*args: str | Path) -> tuple[int, dict[str, Any], str]:
    done = cli_here(*args, "--json")
    return done.returncode, json.loads(done.stdout), done.stderr


# --- the fake server's usage ------------------------------------------------------------------


def test_fake_server_reports_realistic_usage_and_advertised_limits(server: FakeOpenAIServer) -> None:
    import urllib.request

    server.advertise_limits("writer", requests=500, tokens=90_000)
    completions = []
    for length in (40, 400, 4000):
        body = {"model": "writer", "messages": [{"role": "user", "content": "x" * length}], "max_tokens": 50}
        request = urllib.request.Request(
            server.url + "/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request) as response:
            answer = json.loads(response.read())
            assert response.headers["x-ratelimit-limit-requests"] == "500"
            assert response.headers["x-ratelimit-limit-tokens"] == "90000"
        prompt = answer["usage"]["prompt_tokens"]
        assert length / 4 * 0.9 <= prompt - 4 <= length / 4 * 1.1  # ≈ characters / 4, with a spread
        completion = answer["usage"]["completion_tokens"]
        assert 1 <= completion <= 50  # bounded by max_tokens
        assert abs(len(answer["choices"][0]["message"]["content"]) - 4 * completion) <= 4
        completions.append(completion)
    assert len(set(completions)) > 1  # answers vary in length


# --- prices -------------------------------------------------------------------------------------


def test_prices_from_the_config_and_a_litellm_table_and_unknown_never_zero(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = pipeline(server, tmp_path, 6)
    del cfg["models"]["writer"]["price"]
    cfg["models"]["writer"]["model"] = "openai/gpt-tiny"
    del cfg["models"]["embedder"]["price"]  # in no table: unknown
    table = {
        "sample_spec": {"input_cost_per_token": "0"},  # LiteLLM's own example entry: ignored
        "gpt-tiny": {"input_cost_per_token": 1.5e-07, "output_cost_per_token": 6e-07, "litellm_provider": "openai"},
    }
    (tmp_path / "prices.json").write_text(json.dumps(table))
    cfg["pricing"] = {"source": "prices.json"}
    server.realistic_usage("*", None)
    server.realistic_usage("openai/gpt-tiny", RealisticUsage(seed=1))
    code, summary, err = run_json("run", write(cfg, tmp_path / "genwire.yaml"))
    assert code == 0, err
    cost = summary["cost"]
    writer = cost["by_model"]["writer"]
    assert writer["price_source"] == "prices.json (gpt-tiny)"
    expected = server.prompt_tokens["openai/gpt-tiny"] * 1.5e-07 + server.completion_tokens["openai/gpt-tiny"] * 6e-07
    assert writer["usd"] == pytest.approx(expected, rel=1e-9) and writer["usd"] > 0
    assert cost["by_model"]["embedder"] == {
        "input_tokens": server.prompt_tokens["embedder"],
        "output_tokens": 0,
        "requests": server.requests["embedder"],
        "usd": None,
        "price_source": "unknown",
    }
    assert cost["total_usd"] is None  # one model's cost is unknown: so is the total
    text = cli_here("run", tmp_path / "genwire.yaml", "--fresh")
    assert text.returncode == 0, text.stderr
    assert "unknown" in text.stdout and "prices.json (gpt-tiny)" in text.stdout


def test_a_price_table_that_cannot_be_used_is_a_clear_error(server: FakeOpenAIServer, tmp_path: Path) -> None:
    cfg = pipeline(server, tmp_path, 4)
    cfg["pricing"] = {"source": "prices.json"}
    (tmp_path / "prices.json").write_text("[1, 2")
    done = cli_here("run", write(cfg, tmp_path / "genwire.yaml"))
    assert done.returncode == 2
    assert "pricing.source" in done.stderr and "prices.json" in done.stderr and "not JSON" in done.stderr
    assert "Traceback" not in done.stderr and server.total_requests == 0
    cfg["models"]["writer"]["price"] = {"input_per_mtok": -1}
    done = cli_here("validate", write(cfg, tmp_path / "genwire.yaml"))
    assert done.returncode == 2 and "models.writer.price.input_per_mtok" in done.stderr


# --- estimate -----------------------------------------------------------------------------------


def test_estimate_keeps_its_rows_and_the_run_sends_nothing_for_them(server: FakeOpenAIServer, tmp_path: Path) -> None:
    n, k = 40, 8
    path = write(pipeline(server, tmp_path, n), tmp_path / "genwire.yaml")
    server.advertise_limits("writer", requests=600)
    code, found, err = run_json("estimate", path, "-k", str(k))
    assert code == 0, err
    assert found["ok"] and found["sample_rows"] == k and found["rows_left"] == n - k
    writer = found["models"]["writer"]
    assert writer["requests_per_row"] == 2.0 and writer["requests"] == 2 * (n - k)
    assert writer["price_source"] == "models.writer.price"
    assert 0 < writer["output_tokens_mean"] <= writer["output_tokens_p95"] <= MAX_TOKENS
    assert writer["worst_cost_usd"] > writer["cost_usd"] > 0
    assert found["cost_usd"] == pytest.approx(sum(m["cost_usd"] for m in found["models"].values()))
    # 2·32 requests at 600/min take 6.4 s: slower than 8 in flight at 10 ms
    assert found["binding_limit"] == "x-ratelimit-limit-requests 600/min (writer)"
    assert found["duration_s"] >= 6.4
    sampled = server.requests["writer"]
    assert sampled == 1 + 2 * k  # the probe and the sample's rows
    server.reset_stats()
    code, summary, err = run_json("run", path)
    assert code == 0, err
    assert summary["rows_resumed"] == k and summary["rows_written"] == n
    assert server.requests["writer"] == 1 + 2 * (n - k)  # nothing for the estimated rows
    # The ledger continues the estimate's: the run's total includes what the sample cost.
    assert summary["cost"]["total_usd"] > summary["cost"]["this_session_usd"] > 0
    table = cli_here("estimate", path, "-n", str(n + 10), "-k", "5")
    assert table.returncode == 0, table.stderr
    assert "Estimate: 5 rows sampled" in table.stdout and "models.writer.price" in table.stdout
    assert "bound by" in table.stdout and f"genwire run {path} -n {n + 10}" in table.stdout


# A known output limit is the bound whatever max_tokens says (a model may ignore it: SPEC §16).
@pytest.mark.parametrize(("params", "limit", "answer_bound"), [({"n": 2}, 500, 1000), ({"max_tokens": 40}, 500, 500)])
def test_the_estimates_worst_case_is_what_the_budget_reserves(
    server: FakeOpenAIServer, tmp_path: Path, params: dict[str, int], limit: int, answer_bound: int
) -> None:
    """Without max_tokens, an answer may run to the model's output limit (n answers: n
    times that), as the budget reserves it; not the longest answer the sample happened to see."""
    cfg = pipeline(server, tmp_path, 12)
    cfg["models"]["writer"]["params"] = params
    cfg["models"]["writer"]["max_output_tokens"] = limit
    code, found, err = run_json("estimate", write(cfg, tmp_path / "genwire.yaml"), "-k", "4")
    assert code == 0, err
    writer = found["models"]["writer"]
    assert writer["output_tokens_p95"] < answer_bound  # the sample's answers are shorter
    inp, out = PRICES["writer"]
    requests = writer["requests"]
    expected = (round(requests * writer["input_tokens_mean"]) * inp + requests * answer_bound * out) / 1e6
    assert writer["worst_cost_usd"] == pytest.approx(expected, rel=1e-9)


# --- the budget ---------------------------------------------------------------------------------


def test_max_cost_stops_with_exit_3_within_the_cap_and_a_higher_cap_finishes(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    n = 48
    path = write(pipeline(server, tmp_path, n, concurrency=16), tmp_path / "genwire.yaml")
    code, found, err = run_json("estimate", path, "-k", "4")
    assert code == 0, err
    cap = 0.4 * (found["cost_usd"] + found["cost"]["this_session_usd"])
    done = cli_here("run", path, "--max-cost", repr(cap))
    assert done.returncode == 3, done.stderr
    assert "stopped at the budget" in done.stderr and f"${cap:g}" in done.stderr and "--max-cost" in done.stderr
    assert "Traceback" not in done.stderr
    assert server_usd(server) <= cap  # the server's own count
    assert (checkpoint_dir(tmp_path / "out.jsonl") / LEDGER_NAME).exists()
    before = server.total_requests
    code, refused, _ = run_json("run", path, "--max-cost", repr(cap))  # same cap: not even the probes fit
    assert code == 2 and refused["ok"] is False and "below what the pre-flight alone may cost" in refused["error"]
    assert "spent" in refused["error"] and server.total_requests == before
    code, stopped, _ = run_json("run", path, "--max-cost", repr(cap * 1.2), "--skip-preflight")
    assert code == 3 and stopped["ok"] is False and stopped["max_cost_usd"] == cap * 1.2
    assert stopped["spent_usd"] <= cap * 1.2 and server_usd(server) <= cap * 1.2
    code, summary, err = run_json("run", path, "--max-cost", repr(cap * 10))
    assert code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == n
    assert summary["cost"]["total_usd"] == pytest.approx(server_usd(server), rel=1e-9)


def test_a_budget_that_cannot_be_kept_is_refused_before_any_request(server: FakeOpenAIServer, tmp_path: Path) -> None:
    cfg = pipeline(server, tmp_path, 10)
    del cfg["models"]["embedder"]["price"]
    path = write(cfg, tmp_path / "genwire.yaml")
    done = cli_here("run", path, "--max-cost", "5")
    assert done.returncode == 2
    assert "no price for model(s) embedder" in done.stderr and "max_tokens" in done.stderr
    cfg = pipeline(server, tmp_path, 10, budget={"max_cost_usd": 1e-9})
    done = cli_here("run", write(cfg, tmp_path / "genwire.yaml"))
    assert done.returncode == 2 and "below what the pre-flight alone may cost" in done.stderr
    assert server.total_requests == 0


def test_a_token_budget_in_the_config(server: FakeOpenAIServer, tmp_path: Path) -> None:
    path = write(pipeline(server, tmp_path, 40, budget={"max_tokens": 4000}), tmp_path / "genwire.yaml")
    code, summary, _ = run_json("run", path)
    assert code == 3 and "4,000-token cap" in summary["error"]
    assert sum(server.prompt_tokens.values()) + sum(server.completion_tokens.values()) <= 4000


# --- the ledger ---------------------------------------------------------------------------------


def test_kill_9_then_rerun_the_ledger_equals_the_servers_count(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.set_latency("writer", 0.05)
    path = write(pipeline(server, tmp_path, 120, concurrency=4), tmp_path / "genwire.yaml")
    ledger = checkpoint_dir(tmp_path / "out.jsonl") / LEDGER_NAME
    proc = start_cli("run", path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not ledger.exists() or ledger.read_bytes().count(b"\n") < 30):
            time.sleep(0.05)
        assert ledger.exists(), proc.stderr.read() if proc.poll() is not None else "no ledger"
        # Answers stop (requests hang, uncounted), the answers already sent are recorded: then kill -9.
        server.fail_when("*", "", "hang")
        last, stable_since = -1, time.monotonic()
        while time.monotonic() - stable_since < 0.5:
            lines = ledger.read_bytes().count(b"\n")
            if lines != last:
                last, stable_since = lines, time.monotonic()
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    server.clear()
    paid_before = server_usd(server)
    assert paid_before > 0
    code, summary, err = run_json("run", path)
    assert code == 0, err
    assert summary["cost"]["total_usd"] == pytest.approx(server_usd(server), rel=1e-9)
    assert summary["cost"]["this_session_usd"] == pytest.approx(server_usd(server) - paid_before, rel=1e-9)
    by_model = summary["cost"]["by_model"]
    assert by_model["writer"]["input_tokens"] == server.prompt_tokens["writer"]
    assert by_model["writer"]["output_tokens"] == server.completion_tokens["writer"]


def test_cached_answers_cost_nothing_and_say_what_they_saved(server: FakeOpenAIServer, tmp_path: Path) -> None:
    path = write(pipeline(server, tmp_path, 16), tmp_path / "genwire.yaml")
    code, paid, err = run_json("run", path)
    assert code == 0, err
    first = server_usd(server)
    requests = server.total_requests
    code, again, err = run_json("run", path, "--fresh")
    assert code == 0, err
    cost = again["cost"]
    assert server.total_requests == requests + 2  # the two probes: every answer came from the cache
    assert cost["this_session_usd"] == cost["total_usd"] == pytest.approx(server_usd(server) - first, rel=1e-9)
    # What the answers cost when they were paid (the probes are not cached: less than the first run's total).
    assert 0 < cost["saved_by_cache_usd"] <= paid["cost"]["total_usd"]
    assert cost["saved_by_cache_usd"] == pytest.approx(paid["cost"]["total_usd"], rel=0.05)


def test_ledger_cuts_a_torn_line_and_continues_the_totals(tmp_path: Path) -> None:
    ledger = RunLedger(tmp_path)
    ledger.record(Paid("writer", 100, 20, 0.5, False))
    ledger.record(Paid("embedder", 30, 0, None, False))
    ledger.close()
    with (tmp_path / LEDGER_NAME).open("ab") as handle:
        handle.write(b'{"m":"writer","in":7')  # killed mid-write
    again = RunLedger(tmp_path)
    assert again.earlier_usd == 0.5 and again.earlier_tokens == 150 and again.entries == 2
    assert again.totals["embedder"].unpriced == 1
    assert (tmp_path / LEDGER_NAME).read_bytes().endswith(b"\n")


async def test_the_meter_waits_for_room_then_refuses_when_nothing_is_in_flight() -> None:
    price = Price(1e-6, 1e-6, 1e-6, 1e-6, "test")
    meter = CostMeter({"m": price}, max_cost_usd=0.001)
    first = await meter.reserve("m", 100, 300)  # worst ~ (100·1.1+16 + 300)·1.1 tokens at $1/Mtok
    assert first.usd == pytest.approx((126 + 300) * 1.1e-6, rel=0.02)
    meter.settle(first, (90, 250), 0.01)  # under a cap a model's first request goes alone
    meter.settle(await meter.reserve("m", 100, 300), (90, 250), 0.01)
    assert meter.spent_usd == pytest.approx(2 * 340e-6)
    with pytest.raises(Exception, match="budget is spent"):
        await meter.reserve("m", 100, 300)  # 0.00068 spent + 0.00047 > 0.001, nothing in flight
    assert meter.exhausted


def test_batch_mode_is_metered_at_the_batch_price(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        server.realistic_usage("*", RealisticUsage(seed=2))
        cfg = pipeline(server, tmp_path, 12)
        cfg["providers"]["srv"]["batch"] = {"poll_interval_s": 0.05}
        cfg["models"]["writer"]["price"]["batch_discount"] = 0.5
        cfg["pipeline"]["columns"] = cfg["pipeline"]["columns"][:3]  # the chat columns
        code, summary, err = run_json("run", write(cfg, tmp_path / "genwire.yaml"), "--batch", "--max-cost", "1")
        assert code == 0, err
        assert server.batches.lines["writer"] == 24 and server.requests["writer"] == 1  # the probe went online
        full_price = server.prompt_tokens["writer"] * 0.15e-6 + server.completion_tokens["writer"] * 0.6e-6
        writer = summary["cost"]["by_model"]["writer"]
        assert writer["requests"] == 25 and writer["input_tokens"] == server.prompt_tokens["writer"]
        assert writer["usd"] == pytest.approx(full_price / 2, rel=0.02)  # the probe alone paid the full price


async def test_what_the_meter_keeps_per_answer_stops_growing_past_what_an_estimate_reads() -> None:
    """A run's memory stays flat in its rows (SPEC §9): the meter counts every answer but
    keeps the tokens and latency (the estimate's means and p95s) of the first
    ``MEASURED_REQUESTS`` only, as 8-byte numbers (a 100,000-row run's RSS grew 15 % from
    20,000 rows with lists, 7 % more with every answer's numbers kept). A count no array
    holds is kept as the largest it can."""
    import tracemalloc

    from genwire.providers.budget.figures import MEASURED_REQUESTS

    meter = CostMeter({"m": Price(1e-6, 1e-6, 1e-6, 1e-6, "test")})
    answers = 3 * MEASURED_REQUESTS
    holds = [await meter.reserve("m", 400, 0) for _ in range(answers)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for number, hold in enumerate(holds):
            meter.settle(hold, (300 + number, 500 + number), 0.25 + number / answers)
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    stats = meter.stats["m"]
    assert stats.requests == answers and len(stats.latencies) == MEASURED_REQUESTS
    assert max(stats.output_tokens) == 500 + MEASURED_REQUESTS - 1  # the first ones
    assert kept < 3 * 8 * MEASURED_REQUESTS * 1.2  # three numbers an answer measured, and the arrays' slack
    assert meter.spent_tokens == sum(800 + 2 * n for n in range(answers))  # every answer paid for
    capped = CostMeter({"m": Price(1e-6, 1e-6, 1e-6, 1e-6, "test")})
    hold = await capped.reserve("m", 400, 0)
    capped.settle(hold, (10**30, 5), 0.1)  # a confused server's usage: counted, not a crash
    assert capped.stats["m"].input_tokens[-1] == 2**63 - 1 and capped.spent_tokens > 10**30


def test_a_ledger_line_is_the_json_of_its_record(tmp_path: Path) -> None:
    """Each line is built from strings escaped once per alias and column: the same bytes
    the JSON encoder makes of the record (odd values fall back to the encoder)."""
    ledger = RunLedger(tmp_path)
    records = [
        (Paid("writer", 812, 95, 0.0001788, False), [17], "question"),
        (Paid('é"\n', 0, 2**70, None, True), [], None),
        (Paid("w", 1, 2, 1e-20, False), [1, 2, 3], "cöl"),
        (Paid("w", 1, 2, float("nan"), False), [4], "c"),
        (Paid("w", 1, 2, 123456789.5, False), [5], "c"),
    ]
    for paid, rows, column in records:
        ledger.record(paid, rows, column)
    ledger.close()
    lines = (tmp_path / LEDGER_NAME).read_text().splitlines()
    fields = [
        {"m": p.alias, "in": p.input_tokens, "out": p.output_tokens, "usd": p.usd, "rows": r, "col": c, "b": p.batched}
        for p, r, c in records
    ]
    expected = [json.dumps(record, separators=(",", ":")) for record in fields]
    assert lines == expected
