"""Tools as wired resources (SPEC §18, issue 36): MCP servers declared, isolated, checked
and stopped like models. The shipped MCP server (genwire.testing.mcp_server) runs for
real, over stdio and HTTP; the model is the fake OpenAI server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

import genwire
from genwire.errors import ErrorClass, ModelError, UndeclaredToolError
from genwire.generators import Generator, GeneratorMetadata, ResourceKind
from genwire.testing import FakeOpenAIServer
from tests.support import cli, start_cli, wait_gone, write
from tests.test_isolation import deep_reachable

SERVER = [sys.executable, "-m", "genwire.testing.mcp_server"]
CANARY = "CANARY-tool-secret-5d1e9a"


def stdio(*args: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "mcp", "transport": "stdio", "command": [*SERVER, *args], **extra}


class EchoUser(Generator[Any]):
    """Calls ``echo`` through its declared tools slot."""

    metadata = GeneratorMetadata(name="echo-user", description="x", required_resources={"web": ResourceKind.TOOLS})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [(await self.resources.web.call("echo", {"text": f"row {i}"})).text for i, _ in enumerate(rows)]


class Outsider(Generator[Any]):
    """Calls a tool its server's allow list does not hold."""

    metadata = GeneratorMetadata(name="outsider", description="x", required_resources={"web": ResourceKind.TOOLS})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [(await self.resources.web.call("env_names", {})).text for _ in rows]


class DynamicOutsider(Generator[Any]):
    """Calls a tool outside allow by a name the static check cannot read."""

    metadata = GeneratorMetadata(
        name="dynamic-outsider", description="x", required_resources={"web": ResourceKind.TOOLS}
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        name = "".join(["env", "_names"])
        return [(await self.resources.web.call(name, {})).text for _ in rows]


class Sneaky(Generator[Any]):
    """Declares nothing and reaches for a tools slot anyway."""

    metadata = GeneratorMetadata(name="sneaky", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [await self.resources.web.list() for _ in rows]


SLOW_MACHINE = {"timeout_s": 60, "deadline_s": 120}  # pre-flight limits: a loaded machine starts servers slowly


def one_column(generator: str, tools: dict[str, Any], **resources: str) -> dict[str, Any]:
    columns = [{"name": "a", "generator": generator, "resources": resources}]
    return {"tools": tools, "pipeline": {"columns": columns}, "preflight": SLOW_MACHINE}


def echo_columns(tools: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    """Columns ``a`` and ``b`` of echo-user, bound to the servers ``a`` and ``b``."""
    columns = [
        {"name": n, "generator": "echo-user", "resources": {"web": server}} for n, server in (("a", a), ("b", b))
    ]
    return {"tools": tools, "pipeline": {"columns": columns}, "preflight": SLOW_MACHINE}


# --- config ---------------------------------------------------------------------------------


def test_tools_config_keeps_env_and_headers_secret() -> None:
    cfg = one_column("echo-user", {"web": stdio(env={"KEY": CANARY}, allow=["echo"])}, web="web")
    container = genwire.boot(cfg, generators=[EchoUser])
    assert CANARY not in repr(container.config) and CANARY not in container.config.model_dump_json()
    http = {"web": {"kind": "mcp", "transport": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": CANARY}}}
    container = genwire.boot(one_column("echo-user", http, web="web"), generators=[EchoUser])
    assert CANARY not in repr(container.config) and CANARY not in container.plan().model_dump_json()


def test_bad_tools_config_is_a_located_error() -> None:
    bad = one_column("echo-user", {"web": {**stdio(), "transport": "pipe"}}, web="web")
    with pytest.raises(genwire.ConfigError, match=r"tools\.web\.transport"):
        genwire.boot(bad, generators=[EchoUser])
    clash = {**one_column("echo-user", {"w": stdio()}, web="w"), "datasets": {"w": {"kind": "jsonl", "path": "x"}}}
    with pytest.raises(genwire.ConfigError, match="names both a tool server and a model or dataset"):
        genwire.boot(clash, generators=[EchoUser])


def test_a_tools_slot_takes_a_tool_server_only() -> None:
    cfg = one_column("echo-user", {"web": stdio()}, web="web")
    cfg["datasets"] = {"people": {"kind": "jsonl", "path": "p.jsonl"}}
    cfg["pipeline"]["columns"][0]["resources"] = {"web": "people"}
    with pytest.raises(genwire.WiringError, match="needs a tools, but 'people' is a dataset; bind one of: web"):
        genwire.boot(cfg, generators=[EchoUser])


def test_plan_shows_tool_bindings_and_targets() -> None:
    container = genwire.boot(one_column("echo-user", {"web": stdio()}, web="web"), generators=[EchoUser])
    plan = container.plan()
    assert plan.columns[0].slots[0].kind is ResourceKind.TOOLS and plan.columns[0].slots[0].resources == ["web"]
    target = plan.target("web")
    assert target.kind is ResourceKind.TOOLS and target.provider == "mcp/stdio"
    assert target.model is not None and "genwire.testing.mcp_server" in target.model and target.used_by == ["a"]


# --- undeclared use: the same error as for models ---------------------------------------------


async def test_a_tool_outside_allow_stops_the_run_like_an_undeclared_model(tmp_path: Path) -> None:
    cfg = one_column("dynamic-outsider", {"web": stdio(allow=["echo"])}, web="web")
    container = genwire.boot(cfg, generators=[DynamicOutsider])
    async with container:
        with pytest.raises(genwire.UndeclaredResourceError) as caught:
            await container.run(num_records=2, output=tmp_path / "o.jsonl", skip_preflight=True)
    assert isinstance(caught.value, UndeclaredToolError)
    message = str(caught.value)
    assert "column 'a' called tool 'env_names' of tool server 'web'" in message
    assert "tools.web.allow" in message and "allowed: echo" in message


async def test_an_undeclared_tools_slot_is_the_undeclared_resource_error() -> None:
    cfg = {
        "tools": {"web": stdio()},
        "pipeline": {
            "columns": [
                {"name": "a", "generator": "echo-user", "resources": {"web": "web"}},
                {"name": "b", "generator": "sneaky"},
            ]
        },
    }
    # Sneaky's source uses self.resources.web: the static check stops boot, naming the kind.
    with pytest.raises(genwire.WiringError, match=r'"web": ResourceKind\.TOOLS'):
        genwire.boot(cfg, generators=[EchoUser, Sneaky])
    from genwire.generators.resources import Resources

    resources = Resources("sneaky", "b", {})
    with pytest.raises(genwire.UndeclaredResourceError, match="used resource slot 'web'"):
        resources.web  # noqa: B018


def test_lint_finds_an_undeclared_tools_slot(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "from genwire.generators import Generator, GeneratorMetadata, ResourceKind\n"
        "class Search(Generator):\n"
        "    metadata = GeneratorMetadata(name='search', description='x',\n"
        "        required_resources={'model': ResourceKind.CHAT_MODEL})\n"
        "    async def generate(self, rows):\n"
        "        hits = await self.resources.web.call('search_docs', {'query': 'x'})\n"
        "        return [hits for _ in rows]\n",
        encoding="utf-8",
    )
    proc = cli("lint", plugin, "--json")
    assert proc.returncode == 1, proc.stderr
    findings = json.loads(proc.stdout)["findings"]
    errors = [f for f in findings if f["severity"] == "error"]
    assert errors and errors[0]["slot"] == "web" and "ResourceKind.TOOLS" in errors[0]["suggested_entry"]


# --- isolation: a tools handle leads nowhere else ----------------------------------------------


async def test_a_tools_handle_reaches_no_session_process_secret_or_other_server() -> None:
    from mcp import ClientSession

    from genwire.providers.tools.server import McpToolServer

    tools = {"web": stdio(env={"KEY": CANARY}, allow=["echo"]), "other": stdio(env={"OTHER": CANARY + "-other"})}
    cfg = echo_columns(tools, "web", "other")
    container = genwire.boot(cfg, generators=[EchoUser])
    async with container:
        gen = container.generator("a")
        assert (await gen.resources.web.call("echo", {"text": "warm"})).text == "warm"  # a live session exists
        found = deep_reachable(gen)
        handles = [o for o in found if type(o).__name__ == "ToolsHandle"]
        assert [h.name for h in handles] == ["web"]
        for obj in found:
            assert not isinstance(obj, McpToolServer | ClientSession | asyncio.subprocess.Process), obj
            assert type(obj).__name__ not in ("SecretStr", "WiredPipeline", "ProviderGraph"), obj
            if isinstance(obj, str):
                assert CANARY not in obj, obj
        handle = gen.resources.web
        for trick in ("_server", "server", "session", "_session", "config", "__dict__"):
            with pytest.raises(AttributeError):
                getattr(handle, trick)
        with pytest.raises(AttributeError):
            handle.name = "other"


# --- the server: environment, sharing, restart, results --------------------------------------------


async def test_a_stdio_server_gets_only_its_declared_variables_and_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GENWIRE_PARENT_ONLY", "must-not-leak")
    cfg = one_column("echo-user", {"web": stdio(env={"DECLARED": CANARY})}, web="web")
    container = genwire.boot(cfg, generators=[EchoUser])
    async with container:
        names = json.loads((await container.generator("a").resources.web.call("env_names", {})).text)
    # LC_CTYPE: Python itself sets it in the server when the locale is C (PEP 538).
    assert set(names) - {"LC_CTYPE"} == {"DECLARED", "PATH"}


async def test_one_process_per_server_shared_by_its_columns(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    cfg = echo_columns({"web": stdio("--pid-file", str(pid_file))}, "web", "web")
    container = genwire.boot(cfg, generators=[EchoUser])
    async with container:
        result = await container.run(num_records=6, output=tmp_path / "o.jsonl")
        pid = int(pid_file.read_text())
        pids = [await container.generator(c).resources.web.call("pid", {}) for c in ("a", "b")]
        assert {p.text for p in pids} == {str(pid)}
    assert result.rows_written == 6
    assert wait_gone(pid), "the server outlived the container"


async def test_a_server_that_dies_is_started_again_once_then_fails_unreachable(tmp_path: Path) -> None:
    cfg = one_column("echo-user", {"web": stdio("--state", str(tmp_path))}, web="web")
    container = genwire.boot(cfg, generators=[EchoUser])
    async with container:
        web = container.generator("a").resources.web
        with pytest.raises(ModelError) as first:
            await web.call("crash_once", {})
        assert first.value.error_class is ErrorClass.UNREACHABLE and "went away during tool 'crash_once'" in str(
            first.value
        )
        assert (await web.call("crash_once", {})).text == "ok after restart"  # started again
        with pytest.raises(ModelError):
            await web.call("crash", {})
        with pytest.raises(ModelError, match="not started again") as gone:
            await web.call("echo", {"text": "x"})
        assert gone.value.error_class is ErrorClass.UNREACHABLE


async def test_tool_errors_timeouts_and_oversized_results() -> None:
    cfg = one_column("echo-user", {"web": stdio(timeout_s=1.5, max_result_mb=0.001)}, web="web")
    container = genwire.boot(cfg, generators=[EchoUser])
    async with container:
        web = container.generator("a").resources.web
        failed = await web.call("fail", {"message": "no such page"})
        assert failed.is_error and "no such page" in failed.text
        with pytest.raises(ModelError) as slow:
            await web.call("slow", {"seconds": 30})
        assert slow.value.error_class is ErrorClass.TIMEOUT
        with pytest.raises(ModelError, match="max_result_mb") as big:
            await web.call("echo", {"text": "x" * 5000})
        assert big.value.error_class is ErrorClass.BAD_RESPONSE
        assert (await web.call("echo", {"text": "still fine"})).text == "still fine"


# --- pre-flight ------------------------------------------------------------------------------------


def test_preflight_reports_every_broken_server_classified_in_one_pass(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    cfg = {
        "tools": {
            "good": stdio(allow=["echo"]),
            "missing": [sys.executable + "-does-not-exist"],
            "lacking": stdio("--only", "echo", allow=["echo", "search_docs"]),
        },
        "pipeline": {
            "output": str(out),
            "columns": [
                {
                    "name": f"c_{n}",
                    "generator": "llm-tools",
                    "resources": {"model": "m", "tools": n},
                    "params": {"prompt": "q"},
                }
                for n in ("good", "missing", "lacking")
            ],
        },
        "providers": {"p": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {"m": {"provider": "p", "model": "x", "kind": "chat", "health_check": False}},
        "preflight": SLOW_MACHINE,
    }
    cfg["tools"]["missing"] = {"kind": "mcp", "transport": "stdio", "command": [str(tmp_path / "no-such-server")]}
    started = time.monotonic()
    proc = cli("run", write(cfg, tmp_path / "genwire.yaml"), "--json")
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    checks = {c["target"]: c for c in report["preflight"]["checks"]}
    assert checks["good"]["status"] == "ok"
    assert checks["missing"]["status"] == "failed" and checks["missing"]["error_class"] == "unreachable"
    assert "no-such-server" in checks["missing"]["message"]
    assert checks["lacking"]["status"] == "failed" and checks["lacking"]["error_class"] == "not_found"
    assert "'search_docs'" in checks["lacking"]["message"]
    assert all(c["latency_s"] <= 60 for c in checks.values())  # each within the per-check timeout
    assert not out.exists()  # no generation
    assert elapsed < 240


async def test_a_server_that_never_answers_times_out_within_the_per_check_timeout() -> None:
    hang = {"kind": "mcp", "transport": "stdio", "command": [sys.executable, "-c", "import time; time.sleep(120)"]}
    cfg = one_column("echo-user", {"web": hang}, web="web")
    cfg["preflight"] = {"timeout_s": 2}
    container = genwire.boot(cfg, generators=[EchoUser])
    async with container:
        report = await container.preflight()
    (check,) = report.checks
    assert check.status == "failed" and check.error_class is ErrorClass.TIMEOUT
    assert check.latency_s < 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_http_server_is_checked_and_called_with_its_headers() -> None:
    port = free_port()
    proc = subprocess.Popen([*SERVER, "--transport", "http", "--port", str(port)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            await asyncio.sleep(0.1)
        http = {"kind": "mcp", "transport": "http", "url": f"http://127.0.0.1:{port}/mcp", "headers": {"X-Key": CANARY}}
        container = genwire.boot(
            one_column("echo-user", {"web": {**http, "allow": ["echo"]}}, web="web"), generators=[EchoUser]
        )
        async with container:
            report = await container.preflight()
            assert report.ok, report
            assert (
                await container.generator("a").resources.web.call("echo", {"text": "over http"})
            ).text == "over http"
        down = {**http, "url": f"http://127.0.0.1:{free_port()}/mcp"}
        container = genwire.boot(one_column("echo-user", {"web": down}, web="web"), generators=[EchoUser])
        async with container:
            report = await container.preflight()
        assert report.checks[0].error_class is ErrorClass.UNREACHABLE
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# --- llm-tools ---------------------------------------------------------------------------------------


def llm_tools_cfg(url: str, tmp_path: Path, tools: dict[str, Any], **params: Any) -> dict[str, Any]:
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"q": q}) + "\n" for q in ("alpha", "beta", "gamma")), encoding="utf-8")
    return {
        "datasets": {"items": {"kind": "jsonl", "path": str(items)}},
        "providers": {"p": {"kind": "openai", "base_url": url, "retries": 0}},
        "models": {"m": {"provider": "p", "model": "tool-caller", "kind": "chat"}},
        "tools": tools,
        "preflight": SLOW_MACHINE,
        "pipeline": {
            "output": str(tmp_path / "out.jsonl"),
            "num_records": 3,
            "columns": [
                {"name": "item", "generator": "seed-dataset", "resources": {"dataset": "items"}},
                {
                    "name": "a",
                    "generator": "llm-tools",
                    "resources": {"model": "m", "tools": "web"},
                    "params": {"prompt": "{{ item.q }} question", "trace_column": "calls", **params},
                },
            ],
        },
    }


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_llm_tools_runs_the_tool_loop_and_traces_it(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_openai_server.tool_calls_when("alpha", [[("fail", {"message": "down"})], [("nope", {})], [("echo", "{bad")]])
    cfg = llm_tools_cfg(fake_openai_server.url, tmp_path, {"web": stdio(allow=["echo", "fail"])})
    container = genwire.boot(cfg)
    async with container:
        result = await container.run(num_records=3, output=tmp_path / "out.jsonl")
    assert result.rows_written == 3
    by_q = {r["item"]["q"]: r["a"] for r in rows(tmp_path / "out.jsonl")}
    plain = by_q["beta"]
    assert plain["calls"] == [
        {"tool": "echo", "arguments": {"text": "beta question"}, "result_chars": 13, "is_error": False}
    ]
    assert "beta question" in plain["answer"] and "1 tool results" in plain["answer"]
    scripted = by_q["alpha"]["calls"]
    assert [(c["tool"], c["is_error"]) for c in scripted] == [("fail", True), ("nope", True), ("echo", True)]
    assert "3 tool results" in by_q["alpha"]["answer"]  # each error went back to the model
    bodies = [b for m, b in fake_openai_server.bodies if m == "tool-caller" and "question" in json.dumps(b)]
    offered = {t["function"]["name"] for t in bodies[0]["tools"]}
    assert offered == {"echo", "fail"}  # only what allow lists


async def test_llm_tools_fails_a_row_with_the_class_of_a_failed_call(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai_server.tool_calls_when("gamma", [[("slow", {"seconds": 30})]])
    fake_openai_server.tool_calls_when("beta", [[("echo", {"text": "x"})]] * 10)
    cfg = llm_tools_cfg(
        fake_openai_server.url, tmp_path, {"web": stdio(allow=["echo", "slow"], timeout_s=1.5)}, max_turns=3
    )
    cfg["pipeline"]["max_failure_rate"] = 1.0
    container = genwire.boot(cfg)
    async with container:
        result = await container.run(num_records=3, output=tmp_path / "out.jsonl")
    assert result.rows_written == 1 and result.rows_failed == 2
    errors = {e["data"]["item"]["q"]: e for e in map(json.loads, Path(result.errors_file).read_text().splitlines())}
    assert errors["gamma"]["error_class"] == "timeout"
    assert errors["beta"]["error_class"] == "bad_response" and "max_turns=3" in errors["beta"]["error"]


async def test_model_turns_are_cached_and_tool_calls_are_not(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.txt"
    cfg = llm_tools_cfg(fake_openai_server.url, tmp_path, {"web": stdio("--calls-file", str(calls), allow=["echo"])})
    cfg["cache"] = {"dir": str(tmp_path / "cache")}
    for attempt in range(2):
        container = genwire.boot(cfg)
        async with container:
            await container.run(num_records=3, output=tmp_path / "out.jsonl", resume=False, skip_preflight=True)
        if attempt == 0:
            first = dict(fake_openai_server.requests)
            fake_openai_server.reset_stats()
    assert first["tool-caller"] == 6  # two turns per row
    assert fake_openai_server.requests.get("tool-caller", 0) == 0  # every turn from the cache
    assert calls.read_text().count("echo") == 6  # the tool was called again on the rerun


# --- lifecycle: kill -9, secrets ------------------------------------------------------------------------


def stop_genwire_during_a_tool_call(fake: FakeOpenAIServer, tmp_path: Path, signum: int) -> tuple[int, int]:
    """``genwire run`` whose rows call a 600 s tool, sent ``signum`` once a call has
    started: (its exit code, the MCP server's PID)."""
    pid_file, calls = tmp_path / "pid", tmp_path / "calls.txt"
    fake.tool_calls_when("question", [[("slow", {"seconds": 600})]])
    server = stdio("--pid-file", str(pid_file), "--calls-file", str(calls), allow=["slow"], timeout_s=900)
    tools = {"web": {**server, "env": {"KEY": CANARY}}}
    proc = start_cli("run", write(llm_tools_cfg(fake.url, tmp_path, tools), tmp_path / "genwire.yaml"))
    try:
        deadline = time.monotonic() + 120
        while not (calls.exists() and "slow" in calls.read_text()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no tool call started"
            time.sleep(0.1)
        server_pid = int(pid_file.read_text())
        assert psutil.pid_exists(server_pid)
        os.kill(proc.pid, signum)
        return proc.wait(timeout=60), server_pid
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def test_kill_9_during_a_tool_call_leaves_no_server_process(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    code, server_pid = stop_genwire_during_a_tool_call(fake_openai_server, tmp_path, signal.SIGKILL)
    assert code == -signal.SIGKILL
    assert wait_gone(server_pid), f"MCP server {server_pid} outlived genwire"
    left = [f for f in tmp_path.rglob("*") if f.is_file() and f.name != "genwire.yaml"]
    assert any(".checkpoint" in str(f) for f in left)  # the killed run's checkpoint stays...
    assert [f for f in left if CANARY.encode() in f.read_bytes()] == []  # ...without the server's secret


def test_a_canary_secret_in_a_server_env_appears_nowhere(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    leaky = {
        "kind": "mcp",
        "transport": "stdio",
        # Prints its secret on stderr and exits: the failure message shows the stderr tail.
        "command": [sys.executable, "-c", "import os, sys; sys.stderr.write('key=' + os.environ['KEY']); sys.exit(3)"],
        "env": {"KEY": CANARY},
    }
    cfg = llm_tools_cfg(fake_openai_server.url, tmp_path, {"web": leaky})
    path = write(cfg, tmp_path / "genwire.yaml")
    texts = []
    for args in (
        ("preflight", path, "--json"),
        ("preflight", path),
        ("plan", path, "--format", "json"),
        ("validate", path),
    ):
        proc = cli(*args)
        texts += [proc.stdout, proc.stderr]
    assert "key=***" in "".join(texts)  # the stderr tail is shown, scrubbed
    # A run whose rows call the server: output, errors file, checkpoint, report, cache.
    fake_openai_server.tool_calls_when("question", [[("echo", {"text": "hello"})]])
    cfg["tools"]["web"] = stdio(env={"KEY": CANARY}, allow=["echo"])
    cfg["cache"] = {"dir": str(tmp_path / "cache")}
    proc = cli("run", write(cfg, tmp_path / "genwire.yaml"), "--json")
    texts += [proc.stdout, proc.stderr]
    assert json.loads(proc.stdout)["rows_written"] == 3
    for file in tmp_path.rglob("*"):
        if file.is_file():
            texts.append(file.read_bytes().decode("utf-8", errors="replace"))
    yaml_text = (tmp_path / "genwire.yaml").read_text()
    assert [t for t in texts if CANARY in t and t != yaml_text] == []


# --- startup, Ray -------------------------------------------------------------------------------------------


def test_mcp_is_imported_only_when_a_config_has_tools(tmp_path: Path) -> None:
    from tests.test_startup_imports import loaded, modules_after

    cfg = one_column("llm-tools", {"web": stdio()}, model="m")
    cfg["pipeline"]["columns"][0]["resources"]["tools"] = "web"
    cfg["pipeline"]["columns"][0]["params"] = {"prompt": "q"}
    cfg["providers"] = {"p": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}}
    cfg["models"] = {"m": {"provider": "p", "model": "x", "kind": "chat"}}
    path = write(cfg, tmp_path / "genwire.yaml")
    for command in ("validate", "plan"):
        code, modules, err = modules_after(command, path)
        assert code == 0, err
        assert loaded(modules, ["mcp", "genwire.providers.tools.server"]) == [], err


# --- the example ----------------------------------------------------------------------------------------------


def test_the_tools_example_runs_offline_and_its_rows_show_tool_use(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    example = Path(__file__).parent.parent / "examples" / "tools" / "genwire.yaml"
    out = tmp_path / "qa.jsonl"
    env = {
        **os.environ,
        "GENWIRE_LLM_URL": fake_openai_server.url,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",  # its `python`
    }
    proc = cli("run", example, "-o", out, "--no-response-cache", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows_written"] == 5 and summary["rows_failed"] == 0
    for row in rows(out):
        (call,) = row["answer"]["calls"]
        assert call["tool"] == "search_docs" and call["arguments"] == {"query": row["item"]["question"]}
        assert call["result_chars"] > 0 and not call["is_error"]
        assert "from 1 tool results" in row["answer"]["answer"]


def test_a_literal_tool_outside_allow_is_a_located_wiring_error_at_load() -> None:
    cfg = one_column("outsider", {"web": stdio(allow=["echo"])}, web="web")
    with pytest.raises(genwire.WiringError) as caught:
        genwire.boot(cfg, generators=[Outsider])
    (problem,) = caught.value.problems
    assert problem.startswith(f"{__file__}:")
    assert "generator 'outsider' (column 'a') calls tool 'env_names' of tool server 'web'" in problem
    assert "tools.web.allow (allowed: echo)" in problem
    # Allowed, or no allow list (every tool the server lists): nothing to report.
    genwire.boot(one_column("outsider", {"web": stdio(allow=["env_names"])}, web="web"), generators=[Outsider])
    genwire.boot(one_column("outsider", {"web": stdio()}, web="web"), generators=[Outsider])


async def test_a_server_that_cannot_start_is_tried_twice_then_its_rows_fail_unreachable(tmp_path: Path) -> None:
    broken = {"kind": "mcp", "transport": "stdio", "command": [str(tmp_path / "no-such-server")]}
    cfg = one_column("echo-user", {"web": broken}, web="web")
    cfg["pipeline"].update(batch_size=1, max_failure_rate=1.0)
    container = genwire.boot(cfg, generators=[EchoUser])
    async with container:
        with pytest.raises(genwire.errors.RunStopped, match="4 of 4 rows failed"):
            await container.run(num_records=4, output=tmp_path / "o.jsonl", skip_preflight=True)
        web = container.generator("a").resources.web
        for _ in range(3):
            with pytest.raises(ModelError) as caught:
                await web.call("echo", {"text": "x"})
            assert caught.value.error_class is ErrorClass.UNREACHABLE
        assert "not started again" in str(caught.value)
        (server,) = container._graph.live_tool_servers
        assert server.starts == 2  # the run's start, one more; then never again
    errors_file = tmp_path / "o.jsonl.errors.jsonl"
    errors = [json.loads(line) for line in errors_file.read_text().splitlines()]
    assert len(errors) == 4 and {e["error_class"] for e in errors} == {"unreachable"}
    assert "no-such-server" in errors[0]["error"]


def test_sigterm_during_a_tool_call_stops_the_server(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    code, server_pid = stop_genwire_during_a_tool_call(fake_openai_server, tmp_path, signal.SIGTERM)
    assert code == 143
    assert wait_gone(server_pid), f"MCP server {server_pid} outlived genwire"


async def test_an_allowed_tool_with_an_invalid_input_schema_fails_the_preflight() -> None:
    cfg = one_column("echo-user", {"web": stdio("--bad-schema", "echo", allow=["echo"])}, web="web")
    container = genwire.boot(cfg, generators=[EchoUser])
    async with container:
        report = await container.preflight()
    (check,) = report.checks
    assert check.error_class is ErrorClass.BAD_RESPONSE and "'echo': not a valid JSON Schema" in check.message


async def test_fake_tools_and_a_fake_chat_model_stand_in_for_real_ones(tmp_path: Path) -> None:
    from genwire.testing import FakeChatModel, FakeTools

    cfg = one_column("echo-user", {"web": stdio()}, web="web")
    container = genwire.boot(cfg, generators=[EchoUser])
    tools = FakeTools({"echo": lambda args: f"fake {args['text']}"})
    async with container:
        with container.override("web", tools):
            report = await container.preflight()
            result = await container.run(num_records=2, output=tmp_path / "o.jsonl")
        assert report.ok and result.rows_written == 2
        assert container._graph.live_tool_servers == []  # the real server was never started
    assert [r["a"] for r in rows(tmp_path / "o.jsonl")] == ["fake row 0", "fake row 1"]
    assert tools.calls == [("echo", {"text": "row 0"}), ("echo", {"text": "row 1"})]
    reply = await FakeChatModel("done").converse([{"role": "user", "content": "q"}], tools=[{"type": "function"}])
    assert reply == {"role": "assistant", "content": "done"}


def test_defaults_tools_binds_an_unbound_tools_slot() -> None:
    cfg = one_column("echo-user", {"web": stdio(), "other": stdio()})
    cfg["defaults"] = {"tools": "other"}
    plan = genwire.boot(cfg, generators=[EchoUser]).plan()
    (slot,) = plan.columns[0].slots
    assert slot.resources == ["other"] and slot.source == "defaults"
    assert [t.name for t in plan.targets] == ["other"] and plan.unreachable == ["web"]


class TextOnlyModel:
    """A chat model with ``complete`` only (like the embedded one): it cannot call tools."""

    async def complete(self, prompt: str, *, system: str | None = None, **params: Any) -> str:
        return "text"


async def test_the_preflight_probes_an_llm_tools_model_with_tools(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = llm_tools_cfg(fake_openai_server.url, tmp_path, {"web": stdio(allow=["echo"])})
    container = genwire.boot(cfg)
    async with container:
        report = await container.preflight()
        assert report.ok, report
        (probe,) = [b for m, b in fake_openai_server.bodies if m == "tool-caller"]
        (echo,) = await container.resource("web").list()
        assert probe["tools"] == [echo.openai()]  # the allowed tools, with their real schemas
        with container.override("m", TextOnlyModel()):
            report = await container.preflight()
    (check,) = [c for c in report.checks if c.target == "m"]
    assert check.status == "failed" and check.error_class is ErrorClass.BAD_RESPONSE
    assert "cannot call tools" in check.message


async def test_the_preflight_probes_with_exactly_the_allowed_tools_and_their_schemas(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = llm_tools_cfg(fake_openai_server.url, tmp_path, {"web": stdio(allow=["echo", "slow"])})
    container = genwire.boot(cfg)
    async with container:
        report = await container.preflight()
        assert report.ok, report
        (probe,) = [b for m, b in fake_openai_server.bodies if m == "tool-caller"]
        offered = {t["function"]["name"]: t["function"]["parameters"] for t in probe["tools"]}
        assert sorted(offered) == ["echo", "slow"]
        assert offered["slow"]["properties"]["seconds"]["type"] == "number"
        (server,) = container._graph.live_tool_servers
        assert server.starts == 1  # listed once: the tools check and the model probe share it
        # A provider that rejects one of those schemas fails in the pre-flight, not mid-run.
        fake_openai_server.reject_tool_schema("tool-caller", "slow")
        report = await container.preflight()
    assert not report.ok
    (check,) = [c for c in report.checks if c.target == "m"]
    assert check.status == "failed" and check.variant == "a" and check.error_class is ErrorClass.BAD_RESPONSE
    assert "Invalid schema for function 'slow'" in check.message


async def test_a_model_probe_whose_tool_server_cannot_be_listed_is_not_sent(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    broken = {"kind": "mcp", "transport": "stdio", "command": [sys.executable, "-c", "raise SystemExit(3)"]}
    container = genwire.boot(llm_tools_cfg(fake_openai_server.url, tmp_path, {"web": broken}))
    async with container:
        report = await container.preflight()
    checks = {c.target: c for c in report.checks}
    assert checks["web"].status == "failed" and checks["web"].error_class is ErrorClass.UNREACHABLE
    assert checks["m"].status == "failed" and "could not be listed" in checks["m"].message
    assert [b for m, b in fake_openai_server.bodies if m == "tool-caller"] == []


# --- issue 41: every ending stops a server's whole group; bounded reads; a stuck start; no mcp --------


def bash_server(tmp_path: Path, *args: str) -> tuple[list[str], Path, Path]:
    """A server started through ``bash -c "sleep 300 & exec server"``: (command, the file
    holding the server's PID, the file holding its child's)."""
    pid_file, child_file = tmp_path / "server.pid", tmp_path / "child.pid"
    server = " ".join([*SERVER, "--pid-file", str(pid_file), *args])
    return ["bash", "-c", f"sleep 300 & echo $! > {child_file}; exec {server}"], pid_file, child_file


def wait_for(path: Path, proc: subprocess.Popen[str] | None = None, text: str = "") -> None:
    deadline = time.monotonic() + 120
    while not (path.exists() and text in path.read_text()):
        assert proc is None or proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never held {text!r}"
        time.sleep(0.1)


def test_ctrl_c_while_a_server_is_stuck_in_initialize_stops_it_and_its_child(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Killed at once, not asked to stop and waited on: it never sees its stdin close."""
    pid_file, child_file, marker = tmp_path / "server.pid", tmp_path / "child.pid", tmp_path / "saw-eof"
    stuck = (
        f"import os, sys, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
        f"sys.stdin.read(); open({str(marker)!r}, 'w').write('eof'); time.sleep(300)"
    )
    command = ["bash", "-c", f'sleep 300 & echo $! > {child_file}; exec {sys.executable} -c "{stuck}"']
    tools = {"web": {"kind": "mcp", "transport": "stdio", "command": command}}
    proc = start_cli("preflight", write(llm_tools_cfg(fake_openai_server.url, tmp_path, tools), tmp_path / "g.yaml"))
    try:
        wait_for(pid_file, proc)
        wait_for(child_file, proc)
        os.kill(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate()
    assert code == 130, err
    pids = {"server": int(pid_file.read_text()), "its child": int(child_file.read_text())}
    assert {name: pid for name, pid in pids.items() if not wait_gone(pid, timeout=5)} == {}
    assert not marker.exists()


@pytest.mark.parametrize("ending", ["finished", "failed", "ctrl-c", "kill-9"])
def test_no_server_or_child_of_one_outlives_any_ending(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, ending: str
) -> None:
    calls = tmp_path / "calls.txt"
    command, pid_file, child_file = bash_server(tmp_path, "--calls-file", str(calls))
    tools = {"web": {"kind": "mcp", "transport": "stdio", "command": command, "timeout_s": 900}}
    cfg = llm_tools_cfg(fake_openai_server.url, tmp_path, tools)
    if ending in ("ctrl-c", "kill-9"):
        fake_openai_server.tool_calls_when("question", [[("slow", {"seconds": 600})]])
    if ending == "failed":  # the pre-flight fails (the model is unreachable) after the server started
        fake_openai_server.fail_when("tool-caller", "", 401)
    proc = start_cli("run", write(cfg, tmp_path / "genwire.yaml"))
    try:
        if ending in ("ctrl-c", "kill-9"):
            wait_for(calls, proc, "slow")
            os.kill(proc.pid, signal.SIGINT if ending == "ctrl-c" else signal.SIGKILL)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate()
    assert code == {"finished": 0, "failed": 1, "ctrl-c": 130, "kill-9": -signal.SIGKILL}[ending], err
    pids = {"server": int(pid_file.read_text()), "its child": int(child_file.read_text())}
    alive = {name: pid for name, pid in pids.items() if not wait_gone(pid, timeout=5)}
    assert alive == {}, f"alive 5 s after the {ending} ending: {alive}"


async def test_a_server_stuck_in_initialize_is_killed_at_once_not_waited_for(tmp_path: Path) -> None:
    """It never answers ``initialize`` and, when its stdin closes, writes a marker and hangs
    on: genwire kills its group without closing its stdin and waiting first."""
    marker, pid_file = tmp_path / "saw-eof", tmp_path / "pid"
    script = (
        "import os, sys, time, pathlib; pathlib.Path(sys.argv[2]).write_text(str(os.getpid())); "
        "sys.stdin.read(); pathlib.Path(sys.argv[1]).write_text('eof'); time.sleep(300)"
    )
    stuck = {"kind": "mcp", "transport": "stdio", "command": [sys.executable, "-c", script, str(marker), str(pid_file)]}
    cfg = one_column("echo-user", {"web": stuck}, web="web")
    cfg["preflight"] = {"timeout_s": 2, "deadline_s": 120}
    container = genwire.boot(cfg, generators=[EchoUser])
    async with container:
        report = await container.preflight()
        assert report.checks[0].error_class is ErrorClass.TIMEOUT
    assert wait_gone(int(pid_file.read_text()), timeout=5)
    assert not marker.exists()  # killed, not asked to stop and waited on


async def test_an_oversized_result_is_dropped_as_it_is_read() -> None:
    cfg = one_column("echo-user", {"web": stdio("--big-mb", "12", allow=["big", "echo"], max_result_mb=1)}, web="web")
    container = genwire.boot(cfg, generators=[EchoUser])
    async with container:
        handle = container.resource("web")
        with pytest.raises(ModelError) as caught:
            await handle.call("big", {})
        assert caught.value.error_class is ErrorClass.BAD_RESPONSE and "max_result_mb" in caught.value.message
        assert (await handle.call("echo", {"text": "still here"})).text == "still here"  # the session goes on


def test_the_stdout_reader_holds_at_most_its_limit_of_one_message() -> None:
    from genwire.providers.tools.stdio import TOO_LARGE, _Lines

    lines = _Lines(limit=1 << 20)
    head = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"'
    held = []
    items = lines.feed(head)
    for _ in range(50):  # 50 MiB in 1 MiB chunks, no newline yet
        items += lines.feed(b"x" * (1 << 20))
        held.append(len(lines.buffer))
    items += lines.feed(b'"}]}}\n{"jsonrpc":"2.0","id":8,"result":{}}\n')
    assert max(held) <= 1 << 20
    first, second = items
    assert first.message.id == 7 and first.message.error.code == TOO_LARGE  # type: ignore[union-attr]
    assert second.message.id == 8  # type: ignore[union-attr]


_PARTIAL_MCP = """\
import sys


class _Block:  # 'mcp' is found, but none of its modules imports (a broken or partial install)
    def find_spec(self, name, path=None, target=None):
        if name.startswith("mcp."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Block())
"""


@pytest.mark.parametrize(
    "blocker_code",
    ["import sys\nsys.modules['mcp'] = None  # as if not installed\n", _PARTIAL_MCP],
    ids=["not-installed", "not-importable"],
)
def test_without_the_mcp_extra_every_command_says_how_to_install_it(tmp_path: Path, blocker_code: str) -> None:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(blocker_code)
    cfg = one_column("llm-tools", {"web": stdio()}, model="m")
    cfg["pipeline"]["columns"][0]["resources"]["tools"] = "web"
    cfg["pipeline"]["columns"][0]["params"] = {"prompt": "q"}
    cfg["providers"] = {"p": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}}
    cfg["models"] = {"m": {"provider": "p", "model": "x", "kind": "chat"}}
    path = write(cfg, tmp_path / "genwire.yaml")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), os.environ.get("PYTHONPATH", "")])}
    # validate looks for the SDK without importing it (it stays fast): a partial install is
    # found by the commands that start a server, before any check
    validate = [("validate", path)] if blocker_code != _PARTIAL_MCP else []
    for args in (*validate, ("preflight", path), ("run", path), ("preflight", path, "--json")):
        proc = cli(*args, env=env)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert "pip install 'genwire[mcp]'" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
        # a setup error: no check is reported as a server's fault
        assert "bad_response" not in proc.stdout + proc.stderr and "failed" not in proc.stdout + proc.stderr
        if "--json" in args:
            assert "pip install 'genwire[mcp]'" in json.loads(proc.stdout)["error"]
        else:  # one message
            assert (proc.stdout + proc.stderr).count("genwire[mcp]") == 1, (args, proc.stdout, proc.stderr)
