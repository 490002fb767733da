"""A canary key, set in config and through the environment, appears nowhere: not in
output, logs, reports, the errors file, exceptions or the repr of any object, also when
things fail (401, connect errors, bodies that echo the request)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import genwire
from genwire.cli.main import cli
from genwire.generators import Generator, GeneratorMetadata, ResourceKind
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_server import FakeResponse
from tests.otlp_receiver import OTLPReceiver
from tests.support import cli as cli_process
from tests.support import start_cli, write

ENV_KEY = "sk-CANARY-env-5f1e"
FILE_KEY = "sk-CANARY-file-77a0"


def config_text(url: str, out: Path) -> str:
    return f"""
providers:
  good: {{kind: openai, base_url: "{url}", api_key: "${{GENWIRE_CANARY}}", backoff_s: 0.01, retries: 1}}
  plain: {{kind: openai, base_url: "{url}", api_key: "{FILE_KEY}", backoff_s: 0.01, retries: 1}}
  down: {{kind: openai, base_url: "http://127.0.0.1:9/v1", api_key: "{FILE_KEY}", retries: 0}}
models:
  writer: {{provider: good, model: writer, kind: chat}}
  echo: {{provider: plain, model: echo, kind: chat}}
  gone: {{provider: down, model: gone, kind: chat}}
pipeline:
  num_records: 40
  output: {out}
  max_failure_rate: 1.0
  columns:
    - {{name: k, generator: sampler, params: {{kind: category, values: [a, b, c, d]}}}}
    - {{name: q, generator: llm-text, resources: {{model: writer}}, params: {{prompt: "{{{{ k }}}}"}}}}
    - {{name: e, generator: llm-text, resources: {{model: echo}}, params: {{prompt: "{{{{ k }}}}"}}}}
"""


def assert_clean(*texts: str) -> None:
    for text in texts:
        assert ENV_KEY not in text and FILE_KEY not in text


def every_repr(*objects: Any) -> list[str]:
    return [repr(o) for o in objects] + [str(o) for o in objects]


def test_canary_never_leaks(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    write_config: Callable[..., Path],
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("GENWIRE_CANARY", ENV_KEY)
    out = tmp_path / "o.jsonl"
    with FakeOpenAIServer() as server:
        server.script("writer", [FakeResponse(status=401, echo_auth=True)] * 2)
        server.fail_when("echo", "a", FakeResponse(status=400, echo_auth=True))  # body echoes the key
        server.fail_when("echo", "b", "echo_auth")
        path = write_config(config_text(server.url, out))
        container = genwire.boot(path)
        texts = asyncio.run(api_side(container, path))
        errors_text = (tmp_path / "o.jsonl.errors.jsonl").read_text()
        assert '"error_class": "bad_response"' in errors_text
        server.script("writer", [FakeResponse(status=401, echo_auth=True)] * 4)  # the CLI meets failures too
        cli_runs = [
            CliRunner().invoke(cli, args)
            for args in (
                ["preflight", str(path)],
                ["preflight", str(path), "--json"],
                ["run", str(path), "-n", "8"],
                ["run", str(path), "-n", "8", "--skip-preflight"],
                ["plan", str(path), "--format", "json"],
                ["--debug", "validate", str(path)],
            )
        ]
    assert any("auth" in r.stdout for r in cli_runs)
    assert_clean(errors_text, out.read_text(), caplog.text, *texts, *(r.stdout + r.stderr for r in cli_runs))


async def api_side(container: genwire.Container, path: Path) -> list[str]:
    texts: list[str] = []
    async with container:
        report = await container.preflight()
        assert report.check("writer").error_class == "auth"
        with pytest.raises(genwire.PreflightError) as info:
            await container.run()
        texts += [str(info.value), "".join(traceback.format_exception(info.value)), report.model_dump_json()]
        result = await container.run(skip_preflight=True)
        assert result.rows_failed > 0
        objects = [
            container,
            container.config,
            container.plan(),
            report,
            result,
            container.resource("writer"),
            container.resource("echo"),
            container.resource("gone"),
            container.generator("q"),
        ]
        texts += [*every_repr(*objects), json.dumps(container.plan().model_dump())]
    unreachable = genwire.boot(path)
    async with unreachable:
        with pytest.raises(genwire.ModelError) as down:
            await unreachable.resource("gone").complete("x")
    texts += [str(down.value), "".join(traceback.format_exception(down.value))]
    return texts


# --- tool servers and URLs (issue 41, item 12) ----------------------------------------------------

TOOL_CANARY = "cnry7Q2xW9kLm4Vz8Rt1"  # in an MCP server's env and in the userinfo of every URL
MCP_SERVER = [sys.executable, "-m", "genwire.testing.mcp_server"]
SLOW_MACHINE = {"timeout_s": 60, "deadline_s": 120}


def fragments(text: str, size: int = 6) -> list[str]:
    """The pieces of TOOL_CANARY (``size`` characters or more) found in ``text``."""
    return [TOOL_CANARY[i : i + size] for i in range(len(TOOL_CANARY) - size + 1) if TOOL_CANARY[i : i + size] in text]


def with_userinfo(url: str) -> str:
    return url.replace("://", f"://user:{TOOL_CANARY}@", 1)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_failing_servers_stderr_is_scrubbed_before_it_is_cut() -> None:
    """Every offset at which the 400-character tail of a server's stderr can cut the secret."""
    from genwire.providers.tools.server import STDERR_TAIL_CHARS

    tools = {}
    for offset in range(len(TOOL_CANARY) + 1):
        after = STDERR_TAIL_CHARS - len(TOOL_CANARY) + offset  # the tail starts `offset` chars into it
        script = f"import os, sys; sys.stderr.write('key=' + os.environ['KEY'] + 'z' * {after}); sys.exit(3)"
        tools[f"s{offset}"] = {"kind": "mcp", "transport": "stdio", "command": [sys.executable, "-c", script]}
        tools[f"s{offset}"]["env"] = {"KEY": TOOL_CANARY}
    columns = [{"name": f"c{n}", "generator": "tools-lister", "resources": {"web": n}} for n in tools]
    cfg = {"tools": tools, "pipeline": {"columns": columns}, "preflight": {**SLOW_MACHINE, "concurrency": 4}}
    container = genwire.boot(cfg, generators=[ToolsLister])
    async with container:
        report = await container.preflight()
    messages = [c.message for c in report.checks]
    assert len(messages) == len(tools) and all("its stderr:" in m for m in messages)
    assert [f for m in messages for f in fragments(m)] == []


class ToolsLister(Generator[Any]):
    metadata = GeneratorMetadata(name="tools-lister", description="x", required_resources={"web": ResourceKind.TOOLS})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [len(await self.resources.web.list()) for _ in rows]


def test_library_log_records_are_scrubbed_and_keep_no_traceback_without_debug(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from genwire import scrub

    scrub.route_logging("mcp", "tool server")
    scrub.remember(TOOL_CANARY)
    scrub.show_tracebacks(False)  # as a command without --debug sets it
    try:
        raise ValueError(f"could not parse {TOOL_CANARY!r}")
    except ValueError:
        logging.getLogger("mcp.client.stdio").exception("Failed to parse JSONRPC message: %s", TOOL_CANARY)
    err = capsys.readouterr().err
    assert "Failed to parse JSONRPC message: ***" in err and "Traceback" not in err and fragments(err) == []
    scrub.show_tracebacks(True)
    try:
        try:
            raise ValueError(f"could not parse {TOOL_CANARY!r}")
        except ValueError:
            logging.getLogger("mcp.shared").exception("boom")
    finally:
        scrub.show_tracebacks(False)
    err = capsys.readouterr().err
    assert "Traceback" in err and "could not parse '***'" in err and fragments(err) == []


def test_a_url_password_is_in_no_config_message(tmp_path: Path) -> None:
    cfg = {
        "providers": {"p": {"kind": "openai", "base_url": f"http://user:{TOOL_CANARY}@host:99999/v1"}},
        "models": {"m": {"provider": "p", "model": "x", "kind": "chat"}},
        "tools": {"web": {"kind": "mcp", "transport": "http", "url": f"http://u:{TOOL_CANARY}@h:abc/mcp"}},
        "pipeline": {"columns": [{"name": "a", "generator": "template", "params": {"template": "x"}}]},
    }
    path = write(cfg, tmp_path / "genwire.yaml")
    for args in (("validate", path), ("preflight", path, "--json"), ("run", path, "--json")):
        proc = run_cli(*args)
        assert proc.returncode == 2, proc.stderr
        assert "providers.p.base_url" in proc.stdout + proc.stderr and "tools.web.url" in proc.stdout + proc.stderr
        assert fragments(proc.stdout + proc.stderr) == []
    with pytest.raises(genwire.ConfigError) as caught:
        genwire.boot(cfg)
    assert fragments(str(caught.value)) == [] and "got 'http://host:99999/v1'" in str(caught.value)


def test_a_tool_server_canary_reaches_no_output_file_or_span(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """The canary: in a server's env (printed by it to stderr and stdout, at every offset of
    a line, at its start and at each call) and in the ``user:password@`` of every URL."""
    fake = fake_openai_server
    fake.tool_calls_when("question", [[("echo", {"text": "hello"})]])
    fake.fail_when("tool-caller", "gamma", 400)  # a failed request: its span's status
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"q": q}) + "\n" for q in ("alpha", "beta", "gamma")), encoding="utf-8")
    leaky = {
        "kind": "mcp",
        "transport": "stdio",
        "command": [*MCP_SERVER, "--leak", "KEY"],
        "env": {"KEY": TOOL_CANARY},
        "allow": ["echo"],
    }
    run_cfg = {
        "datasets": {"items": {"kind": "jsonl", "path": str(items)}},
        "providers": {"p": {"kind": "openai", "base_url": with_userinfo(fake.url), "retries": 0}},
        "models": {"m": {"provider": "p", "model": "tool-caller", "kind": "chat"}},
        "tools": {"web": leaky},
        "preflight": SLOW_MACHINE,
        "pipeline": {
            "output": str(tmp_path / "out" / "out.jsonl"),
            "num_records": 3,
            "max_failure_rate": 1.0,
            "columns": [
                {"name": "item", "generator": "seed-dataset", "resources": {"dataset": "items"}},
                {
                    "name": "a",
                    "generator": "llm-tools",
                    "resources": {"model": "m", "tools": "web"},
                    "params": {"prompt": "{{ item.q }} question", "trace_column": "calls"},
                },
            ],
        },
        "cache": {"dir": str(tmp_path / "cache")},
    }
    down = f"http://user:{TOOL_CANARY}@127.0.0.1:{closed_port()}"
    crash = "import sys; from genwire.testing.mcp_server import leak; leak('KEY'); sys.exit(3)"
    failing_cfg = {
        **run_cfg,
        "providers": {"p": {"kind": "openai", "base_url": down + "/v1", "retries": 0}},
        "tools": {
            "web": {**leaky, "command": [sys.executable, "-c", crash]},
            "remote": {"kind": "mcp", "transport": "http", "url": down + "/mcp"},
        },
    }
    failing_cfg["pipeline"] = {**run_cfg["pipeline"], "columns": [*run_cfg["pipeline"]["columns"]]}
    remote_column = {**run_cfg["pipeline"]["columns"][1], "name": "r", "resources": {"model": "m", "tools": "remote"}}
    failing_cfg["pipeline"]["columns"].append(remote_column)
    run_path = write(run_cfg, tmp_path / "run.yaml")
    failing_path = write(failing_cfg, tmp_path / "failing.yaml")
    texts: list[str] = []
    with OTLPReceiver() as receiver:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_SERVICE_NAME": "genwire-canary-test",
        }
        run = run_cli("run", run_path, "--json", env=env)
        texts += [run.stdout, run.stderr]
        summary = json.loads(run.stdout)
        assert summary["rows_written"] == 2 and summary["rows_failed"] == 1, run.stderr
        for args in (("preflight", failing_path, "--json"), ("preflight", failing_path)):
            proc = run_cli(*args, env=env)
            assert proc.returncode == 1, proc.stderr
            texts += [proc.stdout, proc.stderr]
        # A run killed during a tool call keeps its checkpoint and metrics: they hold no canary either.
        calls = tmp_path / "calls.txt"
        fake.tool_calls_when("delta", [[("slow", {"seconds": 600})]])
        items.write_text(json.dumps({"q": "delta"}) + "\n", encoding="utf-8")
        slow = {**leaky, "command": [*MCP_SERVER, "--leak", "KEY", "--calls-file", str(calls)], "allow": ["slow"]}
        killed_cfg = {**run_cfg, "tools": {"web": {**slow, "timeout_s": 900}}}
        killed_cfg["pipeline"] = {**run_cfg["pipeline"], "output": str(tmp_path / "killed" / "out.jsonl")}
        killed = start_cli("run", write(killed_cfg, tmp_path / "killed.yaml"))
        try:
            deadline = time.monotonic() + 120
            while not (calls.exists() and "slow" in calls.read_text()):
                assert killed.poll() is None and time.monotonic() < deadline, killed.communicate()
                time.sleep(0.1)
            killed.kill()
        finally:
            texts += list(killed.communicate())
        spans = list(receiver.spans)
        bodies = list(receiver.bodies)
    assert "its stderr:" in "".join(texts)  # the failing server's stderr was shown (scrubbed)
    failed = [s for s in spans if s.status_code == 2]
    assert any(s.name.startswith("chat") for s in failed) and all(s.status_message for s in failed)
    assert [s.status_message for s in spans if "://" in s.status_message] == []  # no span carries a URL
    texts += [f"{s.attributes} {s.status_message} {s.resource}" for s in spans]
    texts += [b.decode("latin-1") for b in bodies]
    files = [f for f in tmp_path.rglob("*") if f.is_file() and f.suffix != ".yaml"]
    assert {".html", ".jsonl", ".sqlite3"} <= {f.suffix for f in files}, files  # report, rows, errors, cache
    assert any(".checkpoint" in str(f) for f in files) and any("metrics" in f.name for f in files), files
    texts += [f.read_bytes().decode("utf-8", errors="replace") for f in files]
    assert [(t[:200], fragments(t)) for t in texts if fragments(t)] == []


def run_cli(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return cli_process(*args, env=env, timeout=300)
