"""The budget against models that do not play along (issues 41 and 49, SPEC §16): answers
that grow, a model that ignores ``max_tokens`` (from its probe on, or after keeping it for a
while), ``n`` answers per request, answers without ``usage``. Each run goes over real HTTP
to the fake server at concurrency 256 and stops at the cap; the server's own count of what
it billed is compared with the cap: it never passes it by more than one request's worst
case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support import cli, write

from genwire.config.loader import load_config
from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.engine.records.ledger import RunLedger
from genwire.engine.report import report_path
from genwire.providers.budget import DEFAULT_OUTPUT_LIMIT, CostMeter
from genwire.providers.money import usd as dollars
from genwire.providers.pricing import Price, model_output_limits
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_openai.usage import RealisticUsage

INPUT, OUTPUT = 3.0, 60.0  # USD per million tokens: dear, so a few hundred requests reach the cap
CAP = 1.0


def config(
    server: FakeOpenAIServer, root: Path, n: int = 300, prices: tuple[float, float] = (INPUT, OUTPUT), **model: Any
) -> dict[str, Any]:
    writer = {
        "provider": "srv",
        "model": "writer",
        "kind": "chat",
        "price": {"input_per_mtok": prices[0], "output_per_mtok": prices[1]},
        **model,
    }
    return {
        "providers": {"srv": {"kind": "openai", "base_url": server.url, "max_concurrency": 256}},
        "models": {"writer": writer},
        "defaults": {"chat_model": "writer"},
        "pipeline": {
            "num_records": n,
            "batch_size": 64,
            "output": str(root / "out.jsonl"),
            "columns": [
                {
                    "name": "k",
                    "generator": "sampler",
                    "params": {"kind": "uniform", "low": 1, "high": 9, "integer": True},
                },
                {"name": "q", "generator": "llm-text", "params": {"prompt": "Write about {{ 'topic ' * k }}"}},
            ],
        },
    }


def billed_usd(server: FakeOpenAIServer, prices: tuple[float, float] = (INPUT, OUTPUT)) -> float:
    """What the server billed, from its own count of the tokens it answered with."""
    return (server.prompt_tokens["writer"] * prices[0] + server.completion_tokens["writer"] * prices[1]) / 1e6


def one_request_worst_usd(output_tokens: int, prices: tuple[float, float] = (INPUT, OUTPUT)) -> float:
    """A request's worst case: its output at the bound, its input generously (the
    prompts are under 100 characters, each at least a character a token)."""
    return (1000 * prices[0] + output_tokens * prices[1]) / 1e6


def run(path: Path, *args: str, cap: float = CAP) -> tuple[int, dict[str, Any], str]:
    done = cli("run", path, "--json", "--skip-preflight", "--max-cost", repr(cap), *args, timeout=300)
    return done.returncode, json.loads(done.stdout), done.stderr


@pytest.fixture
def server() -> Any:
    with FakeOpenAIServer(latency=0.2) as srv:  # many requests in flight at once, as on a real endpoint
        yield srv


def test_answers_that_grow_without_max_tokens_hold_the_models_output_limit(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # The red team's case: a $0.30 cap, answers from 5 to 2,000 tokens, no max_tokens.
    # Each request holds the model's output limit (its max_output_tokens), never 1.1 x the
    # longest answer seen so far (which let 256 requests in flight under-reserve together).
    prices, cap = (0.15, 0.60), 0.30
    server.shape_answers("writer", tokens=5, grow_to=2000, over=400)
    path = write(config(server, tmp_path, n=1200, prices=prices, max_output_tokens=2048), tmp_path / "genwire.yaml")
    code, _, err = run(path, cap=cap)
    assert code == 3, err
    billed = billed_usd(server, prices)
    assert billed > 0.5 * cap  # the run did spend up to the cap
    assert billed <= cap + one_request_worst_usd(2048, prices), f"billed ${billed:.4f} for a ${cap} cap"


def test_a_model_that_ignores_max_tokens_under_a_known_output_limit_is_held_at_that_limit(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.shape_answers("writer", tokens=2000, ignore_max_tokens=True)
    cfg = config(server, tmp_path, params={"max_tokens": 50}, max_output_tokens=4096)
    path = write(cfg, tmp_path / "genwire.yaml")
    code, _, err = run(path)
    assert code == 3, err
    assert billed_usd(server) <= CAP + one_request_worst_usd(4096), f"billed ${billed_usd(server):.4f} for a ${CAP} cap"


def run_probed(path: Path, cap: float) -> tuple[int, dict[str, Any], str]:
    """``run`` with the pre-flight on (the default), every probe sent."""
    done = cli("run", path, "--json", "--no-cache", "--max-cost", repr(cap), timeout=300)
    return done.returncode, json.loads(done.stdout), done.stderr


CHEAP = (0.15, 0.60)  # gpt-4o-mini's: a request's worst case at 32,768 output tokens fits in a $0.30 cap


def test_with_the_pre_flight_on_the_probes_long_answer_marks_a_model_that_ignores_max_tokens(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # Issue 49: the probe is the model's first answer (awaited alone); its answer, longer
    # than the probe's max_tokens, marks the model: its rows hold 32,768 tokens each.
    server.shape_answers("writer", tokens=2000, ignore_max_tokens=True)
    cfg = config(server, tmp_path, n=2000, prices=CHEAP, params={"max_tokens": 50})
    code, _, err = run_probed(write(cfg, tmp_path / "genwire.yaml"), 0.30)
    assert code == 3, err
    assert "answered 2,000 output tokens for max_tokens 16" in err  # the probe's
    billed = billed_usd(server, CHEAP)
    assert 0.5 * 0.30 < billed <= 0.30 + one_request_worst_usd(DEFAULT_OUTPUT_LIMIT, CHEAP), f"billed ${billed:.4f}"


def test_a_declared_output_limit_holds_against_a_model_that_keeps_max_tokens_then_grows_past_it(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # Issue 49: 1,800 answers keep max_tokens 250 (the probe's included), most of the cap;
    # then every answer is 2,000 tokens while up to 256 requests are in flight. Each held
    # its output limit (2,048), not 250, so the server never billed more than the cap and
    # one request's worst case (before: every request in flight at the jump overshot).
    server.shape_answers("writer", tokens=2000, ignore_max_tokens=True, honoured=1800)
    cfg = config(server, tmp_path, n=2400, prices=CHEAP, params={"max_tokens": 250}, max_output_tokens=2048)
    code, summary, err = run_probed(write(cfg, tmp_path / "genwire.yaml"), 0.30)
    assert code == 3, err
    billed = billed_usd(server, CHEAP)
    assert server.completion_tokens["writer"] > 1800 * 250  # answers did grow past max_tokens
    assert billed <= 0.30 + one_request_worst_usd(2048, CHEAP), f"billed ${billed:.4f}"
    # The reservations (2,048 tokens each) narrowed the 256 in flight: the run says so.
    narrowed = summary["cost"]["narrowed"]
    assert narrowed["model"] == "writer" and 0 < narrowed["in_flight"] < narrowed["max_concurrency"] == 256
    assert narrowed["message"] in err and "the budget narrowed model writer's requests in flight" in err


def test_an_answer_longer_than_a_declared_max_output_tokens_is_a_warning_and_holds_32768_after(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    server.shape_answers("writer", tokens=500)
    cfg = config(server, tmp_path, n=50, prices=CHEAP, max_output_tokens=300)
    cfg["providers"]["srv"]["max_concurrency"] = 1  # one answer at a time: the warning comes once, first
    code, _, err = run(write(cfg, tmp_path / "genwire.yaml"), cap=100.0)
    assert code == 0, err
    assert err.count("more than its output limit of 300 tokens") == 1, err
    assert "models.writer.max_output_tokens" in err and "32,768 tokens for each of its requests" in err


async def test_a_known_output_limit_is_held_whatever_max_tokens_says_and_a_longer_answer_drops_it() -> None:
    price = Price(1e-6, 1e-6, 1e-6, 1e-6, "test")
    meter = CostMeter({"m": price}, output_limits={"m": 300}, max_cost_usd=10.0)
    assert meter.output_bound("m", 50) == 300 and meter.output_bound("m", 1000) == 1000
    first = await meter.reserve("m", 10, 50)
    second = await meter.reserve("m", 10, 50)  # a known limit is held: no first answer alone
    meter.settle(first, (5, 400), 0.1)
    assert meter.output_bound("m", 50) == DEFAULT_OUTPUT_LIMIT
    meter.release(second)


def test_a_cap_at_40_percent_of_the_runs_cost_still_spends_most_of_it(server: FakeOpenAIServer, tmp_path: Path) -> None:
    # The output limit (1,000) is four times what answers take (250): the reservations
    # narrow the requests in flight near the cap, but the run spends most of it.
    server.shape_answers("writer", tokens=250)
    whole = write(config(server, tmp_path, n=300, max_output_tokens=1000), tmp_path / "whole.yaml")
    code, summary, err = run(whole, cap=1000.0)
    assert code == 0, err
    cost = summary["cost"]["total_usd"]
    cfg = config(server, tmp_path, n=300, max_output_tokens=1000)
    cfg["pipeline"]["output"] = str(tmp_path / "capped.jsonl")
    cfg["pipeline"]["columns"][1]["params"]["prompt"] = "Tell of {{ 'topic ' * k }}"  # not the cache's answers
    code, summary, err = run(write(cfg, tmp_path / "capped.yaml"), cap=0.4 * cost)
    assert code == 3, err
    assert summary["cost"]["total_usd"] >= 0.75 * 0.4 * cost, (summary["cost"]["total_usd"], cost)


def test_n_answers_per_request_are_reserved_n_times(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.realistic_usage("writer", RealisticUsage(seed=3, completion_mean=200))
    path = write(config(server, tmp_path, params={"max_tokens": 300, "n": 8}), tmp_path / "genwire.yaml")
    code, _, err = run(path)
    assert code == 3, err
    assert server.last_body["writer"]["n"] == 8
    assert billed_usd(server) > 0.5 * CAP
    assert billed_usd(server) <= CAP + one_request_worst_usd(8 * 300), f"billed ${billed_usd(server):.4f}"


def test_answers_without_usage_are_settled_at_their_worst_case(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.shape_answers("writer", tokens=150, omit_usage=True)
    path = write(config(server, tmp_path, params={"max_tokens": 200}), tmp_path / "genwire.yaml")
    code, summary, err = run(path)
    assert code == 3, err
    assert err.count("reports no usage") == 1  # said once, not per answer
    assert billed_usd(server) <= CAP + one_request_worst_usd(200)
    # The ledger counted every answer at its worst case: never less than the server billed.
    assert summary["cost"]["total_usd"] >= billed_usd(server) > 0


def test_a_request_without_max_tokens_holds_the_output_limit_of_the_config_the_table_or_the_default(
    tmp_path: Path,
) -> None:
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"big": {"input_cost_per_token": 1e-6, "max_output_tokens": 65536}}))
    cfg = {
        "providers": {"p": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {
            "set": {"provider": "p", "model": "big", "kind": "chat", "max_output_tokens": 1000},
            "table": {"provider": "p", "model": "big", "kind": "chat"},
            "none": {"provider": "p", "model": "other", "kind": "chat"},
        },
        "pricing": {"source": str(table)},
        "pipeline": {"columns": [{"name": "q", "generator": "llm-text", "params": {"prompt": "x", "model": "set"}}]},
    }
    loaded = load_config(write(cfg, tmp_path / "genwire.yaml"))
    limits = model_output_limits(loaded.config, json.loads(table.read_text()))
    assert limits == {"set": 1000, "table": 65536}
    price = Price(0.0, 1e-6, 0.0, 1e-6, "test")
    meter = CostMeter({"set": price, "none": price}, output_limits=limits, max_cost_usd=10.0)
    assert meter.output_bound("set", 0) == 1000
    assert meter.output_bound("set", 50) == 1000  # a known limit is held: the model may ignore max_tokens
    assert meter.output_bound("none", 0) == DEFAULT_OUTPUT_LIMIT


async def test_an_answer_without_usage_teaches_no_characters_per_token() -> None:
    price = Price(1e-6, 1e-6, 1e-6, 1e-6, "test")
    meter = CostMeter({"m": price}, max_cost_usd=10.0)
    hold = await meter.reserve("m", 400, 100)
    meter.settle(hold, (100, 10), 0.1)
    assert meter.stats["m"].chars_per_token == 4.0
    hold = await meter.reserve("m", 400, 100)
    meter.settle(hold, None, 0.1)
    assert meter.stats["m"].chars_per_token == 4.0
    # Settled at what was held: the input at the worst case, the output at max_tokens.
    assert meter.stats["m"].output_tokens[-1] == 100 and meter.stats["m"].input_tokens[-1] >= 100


async def test_under_a_cap_a_models_first_request_goes_alone() -> None:
    import asyncio

    price = Price(1e-6, 1e-6, 1e-6, 1e-6, "test")
    meter = CostMeter({"m": price}, max_cost_usd=10.0)
    first = await meter.reserve("m", 10, 10)
    second = asyncio.ensure_future(meter.reserve("m", 10, 10))
    await asyncio.sleep(0)
    assert not second.done() and meter.waiting == 1
    meter.settle(first, (5, 5), 0.1)
    hold = await asyncio.wait_for(second, 5)
    third = await meter.reserve("m", 10, 10)  # answered once: no longer alone
    meter.release(hold)
    meter.release(third)


def test_the_ledger_of_a_stopped_run_is_what_the_server_billed(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.shape_answers("writer", tokens=300)
    path = write(config(server, tmp_path, params={"max_tokens": 300}), tmp_path / "genwire.yaml")
    code, _, err = run(path)
    assert code == 3, err
    ledger = RunLedger(checkpoint_dir(tmp_path / "out.jsonl"))
    try:
        assert ledger.earlier_usd == pytest.approx(billed_usd(server), rel=1e-9)
    finally:
        ledger.close()


def test_a_budget_stop_shows_what_it_spent_as_a_finished_run_does(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.shape_answers("writer", tokens=300)
    path = write(config(server, tmp_path, params={"max_tokens": 300}), tmp_path / "genwire.yaml")
    done = cli("run", path, "--skip-preflight", "--max-cost", repr(CAP), timeout=300)
    assert done.returncode == 3, done.stderr
    assert "Run summary" in done.stdout and "Cost" in done.stdout and "writer" in done.stdout
    assert "stopped at the budget" in done.stderr
    page = report_path(tmp_path / "out.jsonl").read_text(encoding="utf-8")
    assert '<span class="badge warn" data-metric="outcome">stopped at the budget</span>' in page
    code, summary, err = run(path, cap=2 * CAP)  # resumed: the JSON carries the cost object too
    assert code == 3, err
    assert summary["ok"] is False and "stopped at the budget" in summary["error"]
    by_model = summary["cost"]["by_model"]["writer"]
    assert by_model["usd"] == pytest.approx(billed_usd(server), rel=1e-9) and by_model["output_tokens"] > 0
    assert summary["cost"]["total_usd"] == pytest.approx(billed_usd(server), rel=1e-9)
    assert summary["rows_kept"] == summary["rows_written"] > 0 and summary["max_cost_usd"] == 2 * CAP


def test_a_cap_below_one_requests_worst_case_says_why(server: FakeOpenAIServer, tmp_path: Path) -> None:
    # No max_tokens: one request may answer up to the default output limit, dearer than the cap.
    path = write(config(server, tmp_path), tmp_path / "genwire.yaml")
    code, summary, _ = run(path)
    assert code == 3 and server.total_requests == 0
    assert "one request of writer may cost up to $2.16" in summary["error"]
    assert "max_tokens" in summary["error"] and "max_output_tokens" in summary["error"]


# --- numbers a user gives are finite; the JSON genwire prints is strict ------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_max_cost_must_be_a_finite_number(server: FakeOpenAIServer, tmp_path: Path, value: str) -> None:
    path = write(config(server, tmp_path), tmp_path / "genwire.yaml")
    done = cli("run", path, "--max-cost", value, "--json")
    assert done.returncode == 2 and server.total_requests == 0
    assert "--max-cost" in done.stderr and "not a finite number" in done.stderr
    assert json.loads(done.stdout)["ok"] is False


@pytest.mark.parametrize(
    ("where", "value"),
    [("price.input_per_mtok", ".inf"), ("price.output_per_mtok", ".nan"), ("price.batch_discount", ".nan")],
)
def test_a_price_of_infinity_or_nan_is_a_located_config_error(
    server: FakeOpenAIServer, tmp_path: Path, where: str, value: str
) -> None:
    path = write(config(server, tmp_path), tmp_path / "genwire.yaml")
    key = where.split(".")[1]
    text = path.read_text().replace(f"{key}: ", f"{key}: {value} #", 1)
    if key not in path.read_text():
        text = text.replace("      input_per_mtok:", f"      {key}: {value}\n      input_per_mtok:", 1)
    path.write_text(text)
    done = cli("run", path, "--json")
    assert done.returncode == 2, done.stderr
    error = json.loads(done.stdout)["error"]
    assert f"models.writer.{where}" in error and "finite" in error
    assert server.total_requests == 0


def test_every_json_genwire_prints_is_strict() -> None:
    from genwire.cli.exits import json_text

    text = json_text({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    assert json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} printed")) == {
        "a": None,
        "b": [None, 1.5],
        "c": {"d": None},
    }


# --- resume after a budget stop -------------------------------------------------------------------


def test_resuming_a_budget_stop_with_rows_that_fail_for_good_goes_on(server: FakeOpenAIServer, tmp_path: Path) -> None:
    # A tenth of the rows fail for good (400: never retried). The resumed session retries
    # them first; judged on them, it would stop at max_failure_rate within its first rows,
    # every time: judged on the rows it had not tried, it goes on and finishes.
    server.shape_answers("writer", tokens=100)
    server.fail_when("writer", "item 7", 400)  # items 7, 70-79, 170-179: 21 of 200
    cfg = config(server, tmp_path, params={"max_tokens": 100})
    cfg["pipeline"].update(batch_size=8, max_failure_rate=0.3)
    cfg["pipeline"]["columns"] = [
        {"name": "k", "generator": "sampler", "params": {"kind": "uniform", "low": 0, "high": 199, "integer": True}},
        {"name": "q", "generator": "llm-text", "params": {"prompt": "Write about item {{ k }}."}},
    ]
    path = write(cfg, tmp_path / "genwire.yaml")
    code, first, err = run(path, cap=1.2)
    assert code == 3, err
    assert first["rows_failed"] >= 10  # enough earlier failures to trip the rate if they counted
    code, second, err = run(path, cap=100.0)
    assert code == 0, second.get("error", err)
    assert second["rows_written"] + second["rows_failed"] == 300


def test_a_non_finite_number_in_a_models_params_is_a_located_config_error(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    path = write(config(server, tmp_path, params={"max_tokens": 50}), tmp_path / "genwire.yaml")
    path.write_text(path.read_text().replace("max_tokens: 50", "max_tokens: 50\n      temperature: .nan"))
    done = cli("validate", path)
    assert done.returncode == 2, done.stderr
    assert "models.writer.params" in done.stderr and "temperature: got nan" in done.stderr and "finite" in done.stderr


def test_the_estimate_says_where_the_caps_reservations_narrow_concurrency(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # $0.30 left, each request reserving its 4,096-token output limit (~$0.0028): about
    # 100 in flight of 256.
    server.shape_answers("writer", tokens=100)
    cfg = config(server, tmp_path, n=2000, prices=CHEAP, params={"max_tokens": 200}, max_output_tokens=4096)
    cfg["pipeline"]["budget"] = {"max_cost_usd": 0.30}
    path = write(cfg, tmp_path / "genwire.yaml")
    done = cli("estimate", path, "-k", "5", "--no-cache", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    narrowed = json.loads(done.stdout)["narrowed"]
    assert len(narrowed) == 1 and "narrow model writer's requests in flight to about" in narrowed[0]
    assert "of its max_concurrency 256" in narrowed[0] and "4,096 output tokens" in narrowed[0]
    cfg["pipeline"]["budget"] = {"max_cost_usd": 300.0}  # room for 256 worst cases: nothing said
    cfg["pipeline"]["output"] = str(tmp_path / "roomy.jsonl")
    done = cli("estimate", write(cfg, tmp_path / "roomy.yaml"), "-k", "5", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["narrowed"] == []


def test_a_budget_stop_shows_a_small_spend_with_its_digits(server: FakeOpenAIServer, tmp_path: Path) -> None:
    # Issue 49: "spent $0.0000 of the $0.0003 cap" for $0.000048.
    server.shape_answers("writer", tokens=20)
    cfg = config(server, tmp_path, n=200, prices=CHEAP, params={"max_tokens": 20})
    code, summary, err = run(write(cfg, tmp_path / "genwire.yaml"), cap=0.0003)
    assert code == 3, err
    spent = summary["cost"]["total_usd"]
    assert 0 < spent < 0.0003
    assert f"spent {dollars(spent)} of the $0.0003 cap" in summary["error"]
    assert "$0.0000 " not in summary["error"] and dollars(spent) != "$0.000000"


def test_dollars_keep_their_significant_digits() -> None:
    assert [dollars(v) for v in (0.0, 0.000048, 0.00000005, 0.0123, 12345.678)] == [
        "$0",
        "$0.000048",
        "$0.00000005",
        "$0.0123",
        "$12,345.6780",
    ]


def test_a_gated_budget_stop_counts_the_candidates_begun_and_not_finished(tmp_path: Path) -> None:
    # Issue 49: "from 0 candidates" after paid answers: the candidates whose question was
    # paid for and whose verdict was not are counted, not left out.
    import re

    from test_gated_runs import judged

    with FakeOpenAIServer() as server:
        cfg = judged(server, tmp_path)
        for model in cfg["models"].values():
            model["price"] = {"input_per_mtok": CHEAP[0], "output_per_mtok": CHEAP[1]}
            model["params"] = {"max_tokens": 20}
        code, summary, err = run(write(cfg, tmp_path / "genwire.yaml"), cap=0.00005)
        assert code == 3, err
        begun = r"rows kept from (\d+) candidates \(acceptance [^)]*\), (\d+) more begun and not finished"
        found = re.search(begun, summary["error"])
        assert found is not None, summary["error"]
        questions_without_verdict = server.requests["writer"] - server.requests["judge"]
        assert int(found[2]) >= questions_without_verdict > 0


async def test_what_the_drivers_probe_showed_reaches_a_workers_meter() -> None:
    # A Ray worker's meter learns (the roster's ``learned``) that the driver's probe came
    # back longer than its max_tokens: its first request already holds 32,768 tokens.
    price = Price(1e-6, 1e-6, 1e-6, 1e-6, "test")
    driver = CostMeter({"m": price}, max_cost_usd=10.0)
    probe = await driver.reserve("m", 10, 16)
    driver.settle(probe, (5, 2000), 0.1)
    worker = CostMeter({"m": price}, max_cost_usd=10.0)
    assert worker.output_bound("m", 50) == 50
    worker.learn(driver.learned())
    assert worker.output_bound("m", 50) == driver.output_bound("m", 50) == DEFAULT_OUTPUT_LIMIT
    assert worker.stats["m"].answered == 1  # the probe was the model's first answer, awaited alone
