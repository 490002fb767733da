"""Endpoint pools (SPEC §17): one model alias served by several fake servers over real HTTP.
Each test asserts what happened (who answered, what failed, what was sent), never a speed."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from support import cli, write

import genwire
from genwire.testing import FakeOpenAIServer

MODEL = "meta/llama-3.1-8b-instruct"


@contextmanager
def servers(n: int, **kwargs: Any) -> Iterator[list[FakeOpenAIServer]]:
    with ExitStack() as stack:
        yield [stack.enter_context(FakeOpenAIServer(**kwargs)) for _ in range(n)]


def dead_url() -> str:
    """The URL of a server that is gone: connections are refused."""
    with FakeOpenAIServer() as server:
        url = server.url
    return url


def pool_config(
    urls: list[str],
    root: Path,
    *,
    n: int = 40,
    roles: list[str] | None = None,
    min_healthy: int = 1,
    timeout_s: float = 30.0,
    max_concurrency: int = 4,
) -> dict[str, Any]:
    names = [f"r{i}" for i in range(len(urls))]
    roles = roles or ["primary"] * len(urls)
    return {
        "providers": {
            name: {
                "kind": "openai",
                "base_url": url,
                "max_concurrency": max_concurrency,
                "timeout_s": timeout_s,
                "backoff_s": 0.01,
            }
            for name, url in zip(names, urls, strict=True)
        },
        "models": {
            "writer": {
                "kind": "chat",
                "model": MODEL,
                "endpoints": [{"provider": name, "role": role} for name, role in zip(names, roles, strict=True)],
                "min_healthy": min_healthy,
            }
        },
        "defaults": {"chat_model": "writer"},
        "preflight": {"timeout_s": 5, "deadline_s": 30},
        "cache": {"dir": str(root / "cache")},
        "pipeline": {
            "num_records": n,
            "batch_size": 8,
            "max_failure_rate": 0.0,
            "output": str(root / "out.jsonl"),
            "columns": [{"name": "text", "generator": "llm-text", "params": {"prompt": "Write a sentence"}}],
        },
    }


async def run(cfg: dict[str, Any], **options: Any) -> genwire.RunResult:
    container = genwire.boot(cfg)
    async with container:
        return await container.run(**options)


def generation_requests(server: FakeOpenAIServer) -> int:
    return server.requests.get(MODEL, 0)


# --- config ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"provider": "r0"}, "exactly one of them"),
        ({"endpoints": [{"provider": "r0", "role": "fallback"}]}, "at least one endpoint with role: primary"),
        ({"min_healthy": 3}, "min_healthy is 3 but there are only 2 endpoints"),
        (
            {"endpoints": [{"provider": "r0"}, {"provider": "nope"}]},
            "models.writer.endpoints[1].provider: unknown provider 'nope'",
        ),
        ({"endpoints": [{"provider": "r0"}, {"provider": "here"}]}, "provider 'here' is kind local"),
        ({"endpoints": [{"provider": "r0"}, {"provider": "r0"}]}, "endpoint 'r0' is listed twice"),
    ],
)
def test_a_bad_pool_is_a_located_error(tmp_path: Path, change: dict[str, Any], expected: str) -> None:
    cfg = pool_config(["http://127.0.0.1:9", "http://127.0.0.1:10"], tmp_path)
    cfg["providers"]["here"] = {"kind": "local"}
    cfg["models"]["writer"].update(change)
    with pytest.raises(genwire.ConfigError) as info:
        genwire.boot(cfg)
    assert expected in str(info.value)
    assert "models.writer" in str(info.value)


# --- routing and failover ----------------------------------------------------------------------


async def test_requests_spread_over_the_replicas_and_each_is_reported(tmp_path: Path) -> None:
    with servers(3, latency=0.02) as replicas:
        result = await run(pool_config([s.url for s in replicas], tmp_path, n=60))
    assert result.rows_written == 60 and result.rows_failed == 0
    sent = [generation_requests(s) for s in replicas]
    assert all(count > 0 for count in sent), sent  # every replica took a share
    summary = result.summary()["models"]["writer"]
    endpoints = summary["endpoints"]
    assert sorted(endpoints) == ["r0", "r1", "r2"]
    # The pool's counts are the servers' (the pre-flight's probes are outside the run's pool).
    assert [endpoints[f"r{i}"]["requests"] for i in range(3)] == [c - 1 for c in sent]
    assert all(e["failures"] == 0 and e["latency_p95_s"] >= e["latency_p50_s"] > 0 for e in endpoints.values())


async def test_a_replica_that_dies_mid_run_fails_no_row(tmp_path: Path) -> None:
    with servers(3, latency=0.02) as replicas:
        victim = replicas[0]
        stop = threading.Event()

        def kill_after_some_requests() -> None:
            while not stop.is_set():
                if generation_requests(victim) >= 15:
                    victim.stop()  # in-flight requests are cut, later connections refused
                    return
                stop.wait(0.005)

        killer = threading.Thread(target=kill_after_some_requests)
        killer.start()
        try:
            result = await run(pool_config([s.url for s in replicas], tmp_path, n=150))
        finally:
            stop.set()
            killer.join()
    assert result.rows_written == 150 and result.rows_failed == 0
    endpoints = result.summary()["models"]["writer"]["endpoints"]
    assert endpoints["r0"]["failures"] >= 1  # it did die under the run
    assert endpoints["r1"]["requests"] + endpoints["r2"]["requests"] >= 150 - endpoints["r0"]["requests"]


async def test_a_hanging_replica_times_out_and_later_requests_go_elsewhere(tmp_path: Path) -> None:
    with servers(2) as (hanging, healthy):
        hanging.fail_when("*", "", "hang")  # accepts every request, never answers
        cfg = pool_config([hanging.url, healthy.url], tmp_path, n=60, timeout_s=1.0, max_concurrency=4)
        container = genwire.boot(cfg)
        async with container:
            report = await container.preflight()
            result = await container.run(skip_preflight=True)
        hung = generation_requests(hanging)
    assert report.ok and report.check("writer", endpoint="r0").status == "degraded"
    assert report.check("writer", endpoint="r0").error_class == "timeout"
    assert result.rows_written == 60 and result.rows_failed == 0
    # The pre-flight's probe, then at most one round of its slots before its first
    # timeout cooled it down, and a trial per cooldown (5 s, 10 s...); not one per row.
    assert hung <= 1 + 4 + 3, hung
    assert result.summary()["models"]["writer"]["endpoints"]["r0"]["failures"] == hung - 1


async def test_an_endpoint_that_keeps_answering_429_hands_its_requests_to_another(tmp_path: Path) -> None:
    with servers(2) as (limited, free):
        limited.fail_when("*", "", 429)  # every request refused, again and again
        result = await run(pool_config([limited.url, free.url], tmp_path, n=30), skip_preflight=True)
        refused = generation_requests(limited)
    assert result.rows_written == 30 and result.rows_failed == 0
    assert generation_requests(free) == 30
    # A stray 429 is waited out on the same endpoint; a third for one request hands it on.
    endpoints = result.summary()["models"]["writer"]["endpoints"]
    assert endpoints["r0"]["failures"] >= 1 and refused == endpoints["r0"]["requests"]
    assert refused <= 3 * 4 + 3 * 3, refused  # its slots' requests, then trials; not 30 rows' worth


async def test_an_endpoint_refusing_the_key_is_out_for_the_run(tmp_path: Path) -> None:
    with servers(2) as (locked, good):
        locked.require_api_key("sk-not-the-one-we-have")
        cfg = pool_config([locked.url, good.url], tmp_path, n=30)
        container = genwire.boot(cfg)
        async with container:
            result = await container.run(skip_preflight=True)
        refused = generation_requests(locked)
    assert result.rows_written == 30 and result.rows_failed == 0
    # The requests already on their way when the first 401 came back (its 4 slots), then
    # never again: no trial after a cooldown.
    assert 1 <= refused <= 4, refused


async def test_a_pool_where_no_endpoint_answers_fails_its_rows_with_the_last_error(tmp_path: Path) -> None:
    cfg = pool_config([dead_url(), dead_url()], tmp_path, n=3)
    with pytest.raises(genwire.RunStopped, match="3 of 3 rows failed"):
        await run(cfg, skip_preflight=True)
    errors = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
    assert len(errors) == 3
    assert all("endpoint r" in json.dumps(e) and "unreachable" in json.dumps(e) for e in errors), errors


# --- pre-flight ----------------------------------------------------------------------------


async def test_primary_dead_fallback_alive_is_degraded_and_the_run_completes_on_the_fallback(tmp_path: Path) -> None:
    with FakeOpenAIServer() as fallback:
        cfg = pool_config([dead_url(), fallback.url], tmp_path, n=20, roles=["primary", "fallback"])
        config = write(cfg, tmp_path / "genwire.yaml")
        proc = cli("preflight", config, "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "warning" in proc.stderr and "writer via r0" in proc.stderr
        checks = json.loads(proc.stdout)["checks"]
        assert [(c["endpoint"], c["status"]) for c in checks] == [("r0", "degraded"), ("r1", "ok")]
        fallback.reset_stats()
        proc = cli("run", config, "--json")
        answered = generation_requests(fallback)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows_written"] == 20 and summary["rows_failed"] == 0
    assert "degraded" in proc.stderr  # the pre-flight's table says so
    assert "warning: pre-flight passed with degraded endpoint pools" in proc.stderr  # and the run warns too
    endpoints = summary["models"]["writer"]["endpoints"]
    assert endpoints["r1"]["requests"] == 20 and endpoints["r1"]["failures"] == 0
    # The pre-flight found it dead: it starts cooled down (a trial after 5 s at most).
    assert endpoints["r0"]["failures"] == endpoints["r0"]["requests"] <= 1
    assert answered == 1 + 20  # its probe and every row
    # The report page lists the pool's endpoints as the summary does (SPEC §17, §19).
    page = Path(summary["output"] + ".report.html").read_text(encoding="utf-8")
    for name, stats in endpoints.items():
        for field in ("requests", "failures"):
            assert f'data-endpoint="writer/{name}" data-field="{field}">{stats[field]:,}<' in page, (name, field)
        assert f"writer via {name}</td>" in page  # its pre-flight check, named by endpoint


def test_min_healthy_two_with_one_member_dead_fails_naming_it(tmp_path: Path) -> None:
    with FakeOpenAIServer() as alive:
        cfg = pool_config([alive.url, dead_url()], tmp_path, min_healthy=2)
        config = write(cfg, tmp_path / "genwire.yaml")
        proc = cli("preflight", config)
        table = cli("preflight", config, "--json")
    assert proc.returncode == 1
    assert "writer via r1" in proc.stdout
    checks = json.loads(table.stdout)["checks"]
    assert [(c["endpoint"], c["status"]) for c in checks] == [("r0", "ok"), ("r1", "failed")]
    assert "min_healthy 2" in checks[1]["message"]


# --- response cache ----------------------------------------------------------------------------


async def test_a_rerun_after_failover_sends_no_generation_request(tmp_path: Path) -> None:
    with servers(2) as (a, b):
        a.fail_when("*", "", 503)  # every answer of the first run comes from b, after a failover
        cfg = pool_config([a.url, b.url], tmp_path, n=24)
        first = await run(cfg, skip_preflight=True)
        assert first.rows_written == 24 and generation_requests(b) == 24
        assert first.summary()["models"]["writer"]["endpoints"]["r0"]["failures"] >= 1
        written = (tmp_path / "out.jsonl").read_bytes()

        a.clear()
        b.fail_when("*", "", 503)  # now the other way round: a answers, b is down
        a.reset_stats()
        b.reset_stats()
        again = await run(cfg, skip_preflight=True, resume=False)
        assert (generation_requests(a), generation_requests(b)) == (0, 0)
    assert again.rows_written == 24 and again.usage["writer"].cached == 24
    assert (tmp_path / "out.jsonl").read_bytes() == written


async def test_members_serving_another_model_do_not_share_answers(tmp_path: Path) -> None:
    with servers(2) as (a, b):
        cfg = pool_config([a.url, b.url], tmp_path, n=10)
        cfg["models"]["writer"]["endpoints"][1]["model"] = MODEL + "-fp8"
        cfg["models"]["writer"]["endpoints"][1]["role"] = "fallback"
        a.fail_when("*", "", 503)
        await run(cfg, skip_preflight=True)  # every answer from the fallback's model
        assert b.requests.get(MODEL + "-fp8", 0) == 10
        a.clear()
        a.reset_stats()
        again = await run(cfg, skip_preflight=True, resume=False)
        assert generation_requests(a) == 10  # nothing of the other model's was reused
    assert again.rows_written == 10


# --- isolation ---------------------------------------------------------------------------------


async def test_a_pooled_handle_is_read_only_and_leads_to_no_provider(tmp_path: Path) -> None:
    from genwire.providers.openai.provider import OpenAIProvider

    with FakeOpenAIServer() as server:
        container = genwire.boot(pool_config([server.url, server.url], tmp_path))
        async with container:
            handle = container.resource("writer")
            assert await handle.complete("hello")
            with pytest.raises(AttributeError):
                handle.alias = "other"
            assert repr(handle) == f"PooledChatModel(alias='writer', model='{MODEL}')"
            assert not hasattr(handle, "__dict__")
            assert not any(isinstance(getattr(handle, s, None), OpenAIProvider) for s in type(handle).__slots__)


async def test_batch_mode_sends_each_pool_row_in_one_batch_of_one_endpoint(tmp_path: Path) -> None:
    with servers(2) as (a, b):
        cfg = pool_config([a.url, b.url], tmp_path, n=40, max_concurrency=2)
        for provider in cfg["providers"].values():
            provider["batch"] = {"poll_interval_s": 0.05}
        container = genwire.boot(cfg)
        async with container:
            result = await container.run(batch=True, probe_cache=False)
        online = generation_requests(a) + generation_requests(b)
    assert result.rows_written == 40 and result.rows_failed == 0
    assert online == 2  # the pre-flight's probes only: every row went in a batch
    assert result.usage["writer"].batched == 40
    # One round: each endpoint's share in its own provider's batch (not rounds of 2 slots).
    # One round: each endpoint's share in its own provider's batch (not rounds of 2 slots),
    # never one line in two batches (each provider's spool files are its own).
    assert result.batches is not None and 1 <= len(result.batches) <= 2
    assert {b.provider for b in result.batches} <= {"r0", "r1"}
    assert sum(b.requests for b in result.batches) == 40


async def test_checks_streamed_as_they_finish_give_a_pools_endpoints_their_final_status(tmp_path: Path) -> None:
    from genwire.preflight.runner import run_preflight

    with FakeOpenAIServer() as alive:
        told: list[genwire.CheckResult] = []
        container = genwire.boot(pool_config([dead_url(), alive.url], tmp_path))
        async with container:
            report = await run_preflight(container, use_cache=False, on_check=told.append)
    assert report.ok and report.warning() is not None
    # The dead endpoint fails first, but is told only once its pool is judged: degraded.
    assert sorted((c.endpoint, c.status) for c in told) == [("r0", "degraded"), ("r1", "ok")]


async def test_weights_share_the_requests_even_one_at_a_time(tmp_path: Path) -> None:
    with servers(2) as (light, heavy):
        cfg = pool_config([light.url, heavy.url], tmp_path)
        cfg["models"]["writer"]["endpoints"][1]["weight"] = 3
        container = genwire.boot(cfg)
        async with container:
            handle = container.resource("writer")
            for _ in range(40):  # never two in flight: only the weights decide
                await handle.complete("hello")
        assert (generation_requests(light), generation_requests(heavy)) == (10, 30)


# --- what the pre-flight found, flapping members, tools, batch figures (issue 41) ---------------


async def test_a_member_the_preflight_found_dead_gets_no_first_wave(tmp_path: Path) -> None:
    with FakeOpenAIServer() as alive:
        cfg = pool_config([dead_url(), alive.url], tmp_path, n=40)
        container = genwire.boot(cfg)
        async with container:
            result = await container.run()
    assert result.preflight is not None and result.preflight.check("writer", endpoint="r0").status == "degraded"
    assert result.rows_written == 40 and result.rows_failed == 0
    endpoints = result.summary()["models"]["writer"]["endpoints"]
    # It starts cooled down: no request until its cooldown is over and one trial decides
    # (a run of 40 rows would have to last 15 s for a second one), not a wave of its slots.
    assert endpoints["r0"]["requests"] <= 2, endpoints


async def test_a_member_the_preflight_found_unauthorised_is_out_from_the_start(tmp_path: Path) -> None:
    with servers(2) as (locked, good):
        locked.require_api_key("sk-not-the-one-we-have")
        container = genwire.boot(pool_config([locked.url, good.url], tmp_path, n=40))
        async with container:
            result = await container.run()
        refused = generation_requests(locked)
    assert result.preflight is not None and result.preflight.check("writer", endpoint="r0").error_class == "auth"
    assert result.rows_written == 40 and result.rows_failed == 0
    assert refused == 1  # the pre-flight's probe, and no request of the run
    assert result.summary()["models"]["writer"]["endpoints"]["r0"]["requests"] == 0


async def test_a_flapping_member_is_cooled_down_though_requests_sent_before_its_failure_succeed(
    tmp_path: Path,
) -> None:
    with servers(2, latency=0.05) as (flapping, steady):
        flapping.fail_rate(MODEL, 0.5, (503,), seed=7)  # every other request, at random
        cfg = pool_config([flapping.url, steady.url], tmp_path, n=200, max_concurrency=16)
        cfg["pipeline"]["batch_size"] = 64  # requests in a steady flow: answers come back staggered
        result = await run(cfg, skip_preflight=True)
        sent = generation_requests(flapping)
    assert result.rows_written == 200 and result.rows_failed == 0
    # Its 16 slots until its first 503 (those already on their way finish there), then one
    # trial per cooldown (5 s, 10 s...), a trial that passes earning at most another round
    # of slots. Not half of the 200 rows (124 before the fix).
    assert sent <= 40, sent


async def test_a_pool_serves_llm_tools_and_fails_over_between_turns(tmp_path: Path) -> None:
    import sys

    server = [sys.executable, "-m", "genwire.testing.mcp_server"]
    with servers(2) as (a, b):
        for s in (a, b):
            s.tool_calls_when("question", [[("echo", {"text": "looked up"})]])
        cfg = pool_config([a.url, b.url], tmp_path, n=6)
        cfg["tools"] = {"web": {"kind": "mcp", "transport": "stdio", "command": server, "allow": ["echo"]}}
        cfg["preflight"] = {"timeout_s": 60, "deadline_s": 120}
        cfg["pipeline"]["columns"] = [
            {
                "name": "a",
                "generator": "llm-tools",
                "resources": {"model": "writer", "tools": "web"},
                "params": {"prompt": "question {{ 'x' }}", "trace_column": "calls"},
            }
        ]
        a.fail_when("*", "looked up", 503)  # the turn after the tool call: only b answers it
        container = genwire.boot(cfg)
        async with container:
            result = await container.run()
    assert result.rows_written == 6 and result.rows_failed == 0
    cells = [json.loads(line)["a"] for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert all(
        c["calls"] == [{"tool": "echo", "arguments": {"text": "looked up"}, "result_chars": 9, "is_error": False}]
        for c in cells
    ), cells
    endpoints = result.summary()["models"]["writer"]["endpoints"]
    assert endpoints["r1"]["requests"] >= 6  # every second turn answered by b


async def test_batch_mode_counts_each_endpoints_lines(tmp_path: Path) -> None:
    with servers(2) as (a, b):
        cfg = pool_config([a.url, b.url], tmp_path, n=40, max_concurrency=2)
        cfg["models"]["writer"]["endpoints"][1]["weight"] = 3
        for provider in cfg["providers"].values():
            provider["batch"] = {"poll_interval_s": 0.05}
        container = genwire.boot(cfg)
        async with container:
            result = await container.run(batch=True, probe_cache=False)
    assert result.rows_written == 40 and result.batches is not None
    lines = {name: sum(b.requests for b in result.batches if b.provider == name) for name in ("r0", "r1")}
    endpoints = result.summary()["models"]["writer"]["endpoints"]
    assert {name: endpoints[name]["requests"] for name in ("r0", "r1")} == lines
    assert sum(lines.values()) == 40 and all(endpoints[n]["failures"] == 0 for n in lines)


async def test_batch_mode_counts_an_endpoints_failed_lines_as_its_requests(tmp_path: Path) -> None:
    with servers(2) as (a, b):
        cfg = pool_config([a.url, b.url], tmp_path, n=20, max_concurrency=2)
        cfg["pipeline"]["max_failure_rate"] = 1.0
        for provider in cfg["providers"].values():
            provider["batch"] = {"poll_interval_s": 0.05}
        b.fail_rate(MODEL, 1.0, (400,))  # every line of b's batches is refused
        container = genwire.boot(cfg)
        async with container:
            result = await container.run(batch=True, skip_preflight=True)
    assert result.batches is not None
    lines = {name: sum(x.requests for x in result.batches if x.provider == name) for name in ("r0", "r1")}
    endpoints = result.summary()["models"]["writer"]["endpoints"]
    assert lines["r1"] > 0 and result.rows_failed == lines["r1"]
    assert endpoints["r1"]["requests"] == endpoints["r1"]["failures"] == lines["r1"]
    assert endpoints["r0"]["requests"] == lines["r0"] and endpoints["r0"]["failures"] == 0
