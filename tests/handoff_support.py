"""A gated run for the hand-off's tests (SPEC §24): examples/good-rows, offline against
genwire's fake OpenAI-compatible server, with a canary secret in its API key's variable
and the judge's answers naming a model id of their own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from genwire.cli.main import cli
from genwire.testing.fake_server import FakeOpenAIServer

REPO = Path(__file__).resolve().parent.parent
CANARY = "canary-sk-9f8e7d6c5b4a"
SERVED_AS = "meta/llama-3.1-70b-instruct-2026-11-snapshot"


class GatedRun:
    def __init__(self, project: Path, summary: dict[str, object]) -> None:
        self.project = project
        self.summary = summary
        self.output = project / "out" / "good.jsonl"


def run_good_rows(root: Path, server: FakeOpenAIServer) -> GatedRun:
    project = root / "good-rows"
    shutil.copytree(REPO / "examples" / "good-rows", project, ignore=shutil.ignore_patterns("out", ".genwire"))
    server.vary_structured("*")
    server.serve_as("meta/llama-3.1-70b-instruct", SERVED_AS)
    env = {"GENWIRE_BASE_URL": server.url, "NVIDIA_API_KEY": CANARY}
    result = CliRunner(env=env).invoke(cli, ["run", str(project / "genwire.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    return GatedRun(project, json.loads(result.stdout))
