"""The pre-flight over real HTTP against the fake OpenAI-compatible server."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import genwire
from genwire.cli.main import cli
from genwire.testing import FakeEmbeddingModel, FakeOpenAIServer

CANARY = "sk-CANARY-preflight-42"


def pipeline(
    server: FakeOpenAIServer | str, models: dict[str, dict[str, Any]], columns: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    return {
        "providers": {
            "srv": {
                "kind": "openai",
                "base_url": server if isinstance(server, str) else server.url,
                "api_key": CANARY,
                "backoff_s": 0.01,
                "timeout_s": 5,
            }
        },
        "models": {alias: {"provider": "srv", **spec} for alias, spec in models.items()},
        "pipeline": {"num_records": 2, "columns": columns},
        **extra,
    }


def chat_column(name: str, alias: str) -> dict[str, Any]:
    return {"name": name, "generator": "llm-text", "resources": {"model": alias}, "params": {"prompt": "hi"}}


def embed_column(name: str, alias: str) -> dict[str, Any]:
    return {"name": name, "generator": "embedding", "resources": {"model": alias}, "params": {"column": "t"}}


TEXT = {"name": "t", "generator": "sampler", "params": {"kind": "category", "values": ["a", "b"]}}


async def preflight(cfg: dict[str, Any]) -> genwire.PreflightReport:
    container = genwire.boot(cfg)
    async with container:
        return await container.preflight()


async def test_all_failures_reported_in_one_run(fake_openai_server: FakeOpenAIServer) -> None:
    fake_openai_server.script("bad-auth", [401])
    fake_openai_server.script("gone", [404])
    cfg = pipeline(
        fake_openai_server,
        {
            "a": {"model": "bad-auth", "kind": "chat"},
            "b": {"model": "gone", "kind": "chat"},
            "c": {"model": "fine", "kind": "chat"},
        },
        [chat_column("x", "a"), chat_column("y", "b"), chat_column("z", "c")],
    )
    report = await preflight(cfg)
    assert not report.ok
    assert {c.target: (c.status, c.error_class) for c in report.checks} == {
        "a": ("failed", "auth"),
        "b": ("failed", "not_found"),
        "c": ("ok", None),
    }
    assert report.check("a").used_by == ["x"] and report.check("a").attempts == 1
    assert fake_openai_server.requests["bad-auth"] == 1  # auth is never retried


async def test_transient_then_ok_takes_exactly_two_requests(fake_openai_server: FakeOpenAIServer) -> None:
    fake_openai_server.script("flaky", [503])
    cfg = pipeline(fake_openai_server, {"m": {"model": "flaky", "kind": "chat"}}, [chat_column("q", "m")])
    report = await preflight(cfg)
    assert report.ok and report.check("m").attempts == 2
    assert fake_openai_server.requests["flaky"] == 2


@pytest.mark.parametrize(
    ("item", "error_class"),
    [
        (500, "server_error"),
        ("malformed", "bad_response"),
        ("empty_text", "bad_response"),
        (403, "auth"),
        ("reset", "unreachable"),
    ],
)
async def test_error_classes(fake_openai_server: FakeOpenAIServer, item: Any, error_class: str) -> None:
    fake_openai_server.script("m", [item] * 5)
    cfg = pipeline(fake_openai_server, {"m": {"model": "m", "kind": "chat"}}, [chat_column("q", "m")])
    cfg["providers"]["srv"]["retries"] = 1
    report = await preflight(cfg)
    assert (report.check("m").status, report.check("m").error_class) == ("failed", error_class)


async def test_a_probe_still_rate_limited_at_its_timeout_is_reported_rate_limited(
    fake_openai_server: FakeOpenAIServer,
) -> None:
    from genwire.testing.fake_server import FakeResponse

    fake_openai_server.script("m", [FakeResponse(429, headers={"Retry-After": "0.1"})] * 100)
    cfg = pipeline(fake_openai_server, {"m": {"model": "m", "kind": "chat"}}, [chat_column("q", "m")])
    cfg["preflight"] = {"timeout_s": 0.5}
    report = await preflight(cfg)
    check = report.check("m")
    assert (check.status, check.error_class) == ("failed", "rate_limited")
    assert "still rate-limited after" in (check.message or "") and check.attempts >= 3


async def test_a_briefly_rate_limited_probe_waits_and_passes(fake_openai_server: FakeOpenAIServer) -> None:
    from genwire.testing.fake_server import FakeResponse

    fake_openai_server.script("m", [FakeResponse(429, headers={"Retry-After": "0.1"})] * 4)
    cfg = pipeline(fake_openai_server, {"m": {"model": "m", "kind": "chat"}}, [chat_column("q", "m")])
    cfg["providers"]["srv"]["retries"] = 1  # 429s are bounded by time, not by retries
    report = await preflight(cfg)
    assert report.check("m").status == "ok" and report.check("m").attempts == 5


async def test_unreachable_endpoint() -> None:
    with FakeOpenAIServer() as server:
        url = server.url  # a port nobody listens on once the server stops
    cfg = pipeline(url, {"m": {"model": "m", "kind": "chat"}}, [chat_column("q", "m")])
    cfg["providers"]["srv"]["retries"] = 0
    report = await preflight(cfg)
    assert report.check("m").error_class == "unreachable"


async def test_shared_endpoint_probed_once(fake_openai_server: FakeOpenAIServer) -> None:
    models = {a: {"model": "shared-e", "kind": "embedding", "dimensions": 384} for a in ("e1", "e2", "e3")}
    cfg = pipeline(fake_openai_server, models, [TEXT, *(embed_column(f"v{a}", a) for a in models)])
    report = await preflight(cfg)
    assert report.ok
    assert fake_openai_server.requests["shared-e"] == 1
    assert report.check("e2").aliases == ["e1", "e2", "e3"]


async def test_dimensions_judged_per_alias_each_by_its_own_probe(fake_openai_server: FakeOpenAIServer) -> None:
    models = {
        "small": {"model": "e", "kind": "embedding", "dimensions": 384},
        "wrong": {"model": "e", "kind": "embedding", "dimensions": 768},
    }
    cfg = pipeline(fake_openai_server, models, [TEXT, embed_column("a", "small"), embed_column("b", "wrong")])
    report = await preflight(cfg)
    assert report.check("small").status == "ok"
    assert report.check("wrong").error_class == "bad_response" and "384 dimensions" in report.check("wrong").message
    # The client checks every answer against its alias's `dimensions` (issue 49 item 22):
    # aliases expecting different lengths cannot share one probe.
    assert fake_openai_server.requests["e"] == 2


async def test_unreachable_model_gets_no_request(fake_openai_server: FakeOpenAIServer) -> None:
    models = {"used": {"model": "used", "kind": "chat"}, "idle": {"model": "idle", "kind": "embedding"}}
    cfg = pipeline(fake_openai_server, models, [chat_column("q", "used")])
    report = await preflight(cfg)
    assert [c.target for c in report.checks] == ["used"]
    assert fake_openai_server.requests.get("idle", 0) == 0


@pytest.mark.parametrize("item", ["wrong_dimensions", "nan", "empty_vector"])
async def test_bad_vectors_are_bad_response(fake_openai_server: FakeOpenAIServer, item: str) -> None:
    fake_openai_server.script("e", [item])
    cfg = pipeline(
        fake_openai_server,
        {"emb": {"model": "e", "kind": "embedding", "dimensions": 384}},
        [TEXT, embed_column("v", "emb")],
    )
    report = await preflight(cfg)
    assert report.check("emb").error_class == "bad_response", report.check("emb").message


async def test_hung_endpoint_times_out_within_deadline(fake_openai_server: FakeOpenAIServer) -> None:
    fake_openai_server.script("slow", ["hang"])
    cfg = pipeline(
        fake_openai_server,
        {"m": {"model": "slow", "kind": "chat"}, "ok": {"model": "ok", "kind": "chat"}},
        [chat_column("q", "m"), chat_column("r", "ok")],
        preflight={"timeout_s": 10, "deadline_s": 1.0},
    )
    started = time.perf_counter()
    report = await preflight(cfg)
    elapsed = time.perf_counter() - started
    assert report.check("m").error_class == "timeout"
    assert report.check("ok").status == "ok"
    assert elapsed < 1.0 + 4  # the 1 s deadline, not the 10 s timeout (generous: a loaded machine)


async def test_skipped_and_overridden_targets(fake_openai_server: FakeOpenAIServer) -> None:
    models = {
        "w": {"model": "w", "kind": "chat", "health_check": False},
        "e": {"model": "e", "kind": "embedding", "dimensions": 8},
    }
    cfg = pipeline(fake_openai_server, models, [TEXT, chat_column("q", "w"), embed_column("v", "e")])
    container = genwire.boot(cfg)
    async with container:
        with container.override("e", FakeEmbeddingModel(dimensions=8)):
            report = await container.preflight()
    assert report.check("w").status == "skipped" and "health_check" in report.check("w").message
    assert report.check("e").status == "ok"
    assert fake_openai_server.total_requests == 0  # the fake was probed, not the server


async def test_concurrency_bounds(fake_openai_server: FakeOpenAIServer) -> None:
    fake_openai_server.set_latency("*", 0.0)
    models = {f"m{i}": {"model": f"m{i}", "kind": "chat"} for i in range(12)}
    for i in range(12):
        fake_openai_server.set_latency(f"m{i}", 0.1)
    cols = [chat_column(f"c{i}", f"m{i}") for i in range(12)]
    report = await preflight(pipeline(fake_openai_server, models, cols))
    assert report.ok and fake_openai_server.peak_in_flight == 12  # all at once
    fake_openai_server.reset_stats()
    report = await preflight(pipeline(fake_openai_server, models, cols, preflight={"concurrency": 3}))
    assert report.ok and fake_openai_server.peak_in_flight == 3  # global cap
    fake_openai_server.reset_stats()
    cfg = pipeline(fake_openai_server, models, cols)
    cfg["providers"]["srv"]["max_concurrency"] = 2
    report = await preflight(cfg)
    assert report.ok and fake_openai_server.peak_in_flight == 2  # provider cap


async def test_dataset_checks(tmp_path: Path, fake_openai_server: FakeOpenAIServer) -> None:
    (tmp_path / "people.jsonl").write_text('{"name": "Ada"}\n')
    (tmp_path / "empty.jsonl").write_text("")
    cfg = pipeline(
        fake_openai_server,
        {"w": {"model": "w", "kind": "chat"}},
        [
            {"name": "p", "generator": "seed-dataset", "resources": {"dataset": "people"}},
            {"name": "g", "generator": "seed-dataset", "resources": {"dataset": "ghost"}},
            {"name": "e", "generator": "seed-dataset", "resources": {"dataset": "empty"}},
            {"name": "q", "generator": "llm-text", "resources": {"model": "w"}, "params": {"prompt": "{{ p.email }}"}},
        ],
        datasets={
            "people": {"kind": "jsonl", "path": str(tmp_path / "people.jsonl")},
            "ghost": {"kind": "jsonl", "path": str(tmp_path / "ghost.jsonl")},
            "empty": {"kind": "jsonl", "path": str(tmp_path / "empty.jsonl")},
        },
    )
    report = await preflight(cfg)
    assert report.check("people").error_class == "bad_response" and "email" in report.check("people").message
    assert report.check("ghost").error_class == "not_found"
    assert report.check("empty").error_class == "bad_response" and "no rows" in report.check("empty").message


def test_cli_json_report_and_no_secret_anywhere(
    fake_openai_server: FakeOpenAIServer,
    write_config: Callable[[str], Path],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_openai_server.require_api_key("the-right-key")
    fake_openai_server.script("e", [genwire.testing.fake_server.FakeResponse(status=401, echo_auth=True)])
    monkeypatch.setenv("GENWIRE_TEST_KEY", CANARY)
    path = write_config(f"""
providers:
  srv: {{kind: openai, base_url: "{fake_openai_server.url}", api_key: "${{GENWIRE_TEST_KEY}}", retries: 0}}
models:
  w: {{provider: srv, model: w, kind: chat}}
  e: {{provider: srv, model: e, kind: embedding}}
pipeline:
  columns:
    - {{name: t, generator: sampler, params: {{kind: uuid}}}}
    - {{name: q, generator: llm-text, resources: {{model: w}}, params: {{prompt: "{{{{ t }}}}"}}}}
    - {{name: v, generator: embedding, resources: {{model: e}}, params: {{column: t}}}}
""")
    caplog.set_level(logging.DEBUG)
    result = CliRunner().invoke(cli, ["preflight", str(path), "--json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert set(report) == {"ok", "duration_s", "checks"} and report["ok"] is False
    assert {c["target"]: c["error_class"] for c in report["checks"]} == {"w": "auth", "e": "auth"}
    assert set(report["checks"][0]) == {
        "target",
        "kind",
        "aliases",
        "status",
        "error_class",
        "message",
        "latency_s",
        "attempts",
        "used_by",
        "variant",
        "cached",
        "age_s",
        "endpoint",  # a pool's endpoint (SPEC §17); null for an alias of one endpoint
    }
    table = CliRunner().invoke(cli, ["preflight", str(path)])
    assert table.exit_code == 1 and "auth" in table.stdout
    everything = result.stdout + result.stderr + table.stdout + table.stderr + caplog.text
    assert CANARY not in everything


async def test_aliases_with_different_keys_are_probed_apart(fake_openai_server: FakeOpenAIServer) -> None:
    """Same URL and model, one key expired: the pre-flight must fail that alias (issue 10)."""
    fake_openai_server.require_api_key("the-good-key-0001")
    providers = {
        "good": {"kind": "openai", "base_url": fake_openai_server.url, "api_key": "the-good-key-0001", "retries": 0},
        "old": {"kind": "openai", "base_url": fake_openai_server.url, "api_key": "an-expired-key-02", "retries": 0},
    }
    cfg = {
        "providers": providers,
        "models": {
            "writer": {"provider": "good", "model": "m", "kind": "chat"},
            "judge": {"provider": "old", "model": "m", "kind": "chat"},
        },
        "pipeline": {"columns": [chat_column("a", "writer"), chat_column("b", "judge")]},
    }
    report = await preflight(cfg)
    assert report.check("writer").status == "ok" and report.check("writer").aliases == ["writer"]
    assert report.check("judge").error_class == "auth"


async def test_alias_asking_for_shorter_vectors_is_judged_on_its_own_request(
    fake_openai_server: FakeOpenAIServer,
) -> None:
    fake_openai_server.set_dimensions("e", 384)
    models = {
        "full": {"model": "e", "kind": "embedding", "dimensions": 384},
        "short": {"model": "e", "kind": "embedding", "dimensions": 128, "params": {"dimensions": 128}},
    }
    report = await preflight(
        pipeline(fake_openai_server, models, [TEXT, embed_column("v", "full"), embed_column("w", "short")])
    )
    assert report.ok, report.checks
    assert report.check("short").aliases == ["short"] and fake_openai_server.requests["e"] == 2


async def test_one_models_429s_never_delay_another_models_probe(fake_openai_server: FakeOpenAIServer) -> None:
    """A model that always answers 429 (Retry-After: 0), one that always answers 503 and
    a healthy one, on one provider: each is judged on its own answers, in one probe time."""
    from genwire.testing.fake_server import FakeResponse

    fake_openai_server.set_latency("fine", 0.2)
    fake_openai_server.script("limited", [FakeResponse(429, headers={"Retry-After": "0"})] * 1000)
    fake_openai_server.script("down", [503] * 1000)
    models = {name: {"model": name, "kind": "chat"} for name in ("limited", "down", "fine")}
    columns = [chat_column(f"c_{name}", name) for name in models]
    cfg = pipeline(fake_openai_server, models, columns, preflight={"timeout_s": 1.5})
    cfg["providers"]["srv"]["retries"] = 2
    started = time.monotonic()
    report = await preflight(cfg)
    took = time.monotonic() - started
    down, fine, limited = report.check("down"), report.check("fine"), report.check("limited")
    assert (down.status, down.error_class, down.attempts) == ("failed", "server_error", 3)
    assert fine.status == "ok"
    assert (limited.status, limited.error_class) == ("failed", "rate_limited")
    # The healthy probe went out with the first round, not queued behind the others'
    # retries or a pause (an order, not a speed: a loaded machine keeps it).
    sent = {name: [t for t, model, _ in fake_openai_server.log if model == name] for name in models}
    assert len(sent["fine"]) == 1 and sent["fine"][0] < min(sent["limited"][-1], sent["down"][-1]), sent
    assert took < 1.5 * 3  # within the probe's timeout, never its retries' sum
