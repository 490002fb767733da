"""A canary key, set in config and through the environment, appears nowhere: not in
output, logs, reports, the errors file, exceptions or the repr of any object, also when
things fail (401, connect errors, bodies that echo the request)."""

from __future__ import annotations

import asyncio
import json
import logging
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import genwire
from genwire.cli.main import cli
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_server import FakeResponse

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
