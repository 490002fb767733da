"""The CLI as a user meets it: clear messages, right exit codes, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from genwire.cli.main import cli

GOOD = """
providers:
  nim: {kind: openai, base_url: "http://127.0.0.1:9/v1", api_key: "sk-CANARY-cli-9"}
models:
  writer: {provider: nim, model: w, kind: chat}
  spare: {provider: nim, model: s, kind: chat}
pipeline:
  columns:
    - {name: topic, generator: sampler, params: {kind: category, values: [a, b]}}
    - {name: q, generator: llm-text, resources: {model: writer}, params: {prompt: "About {{ topic }}"}}
"""


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_validate_ok_and_invalid(write_config: Callable[[str], Path]) -> None:
    code, out, _ = invoke("validate", str(write_config(GOOD)))
    assert code == 0 and "valid — 2 columns, 1 pre-flight target" in out
    bad = write_config(GOOD.replace("model: w,", "model: w, temperature: 3,"), "bad.yaml")
    code, out, err = invoke("validate", str(bad))
    assert code == 2
    assert "bad.yaml:5:37 models.writer.temperature: unknown key 'temperature'" in err
    assert "Traceback" not in err + out
    code, _, err = invoke("validate", "missing.yaml")
    assert code == 2 and "missing.yaml: no such file" in err


def test_wiring_error_exit_2(write_config: Callable[[str], Path]) -> None:
    code, _, err = invoke("validate", str(write_config(GOOD.replace("model: writer}", "model: spair}"))))
    assert code == 2 and "unknown resource 'spair' (did you mean 'spare'?)" in err


def test_plan_formats(write_config: Callable[[str], Path]) -> None:
    path = str(write_config(GOOD))
    code, out, _ = invoke("plan", path, "--format", "json")
    assert code == 0
    plan = json.loads(out)
    assert [t["name"] for t in plan["targets"]] == ["writer"] and plan["unreachable"] == ["spare"]
    assert plan["columns"][1]["slots"][0] == {
        "slot": "model",
        "kind": "chat_model",
        "resources": ["writer"],
        "source": "column",
    }
    code, out, _ = invoke("plan", path, "--format", "mermaid")
    assert code == 0 and out.startswith("flowchart LR") and "r_writer -->|model| c_q" in out
    code, out, _ = invoke("plan", path)
    assert code == 0 and "writer" in out and "spare" in out
    assert "sk-CANARY-cli-9" not in out


def test_plugins_lists_builtins() -> None:
    code, out, _ = invoke("plugins")
    assert code == 0
    for name in ("sampler", "seed-dataset", "llm-text", "embedding", "embedding-dedup", "hard-negatives"):
        assert name in out


def test_real_entry_point_no_traceback_and_debug(write_config: Callable[[str], Path]) -> None:
    bad = str(write_config("pipeline: [1, 2"))
    proc = subprocess.run([sys.executable, "-m", "genwire.cli.main", "validate", bad], capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid YAML" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "genwire.cli.main", "--debug", "validate", bad], capture_output=True, text=True
    )
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_run_rejects_bad_output_before_anything(write_config: Callable[[str], Path]) -> None:
    code, _, err = invoke("run", str(write_config(GOOD)), "-o", "data.txt")
    assert code == 2 and "'.txt' is not a known format; use .jsonl, .csv or .parquet" in err


# --- --json on an invalid config: stdout still holds one JSON object ---------------------------

INVALID = {
    "config": (GOOD.replace("model: w,", "model: w, temperature: 3,"), "bad.yaml:5:37 models.writer.temperature:"),
    "wiring": (
        GOOD.replace("model: writer}", "model: spair}"),
        "bad.yaml:10:50 pipeline.columns[1] (q).resources.model:",
    ),
    "yaml": ("pipeline: [1, 2", "bad.yaml:2:1: invalid YAML"),
}


def json_cli(*args: str) -> tuple[int, dict[str, object], str]:
    proc = subprocess.run([sys.executable, "-m", "genwire.cli.main", *args], capture_output=True, text=True)
    assert proc.stdout.count("\n") == 1, proc.stdout  # one JSON object, one line
    return proc.returncode, json.loads(proc.stdout), proc.stderr


@pytest.mark.parametrize("kind", sorted(INVALID))
def test_run_json_on_an_invalid_config_prints_the_located_errors(write_config: Callable[..., Path], kind: str) -> None:
    text, located = INVALID[kind]
    code, summary, stderr = json_cli("run", str(write_config(text, "bad.yaml")), "--json")
    assert code == 2
    assert summary["ok"] is False and isinstance(summary["errors"], list)
    assert any(located in str(line) for line in summary["errors"]), summary
    assert str(summary["error"]).startswith(("invalid configuration", "wiring error"))
    assert located in stderr  # the message still goes to stderr too
    assert "sk-CANARY-cli-9" not in json.dumps(summary) + stderr


@pytest.mark.parametrize("kind", sorted(INVALID))
def test_preflight_json_on_an_invalid_config_keeps_the_report_keys(
    write_config: Callable[..., Path], kind: str
) -> None:
    text, located = INVALID[kind]
    code, report, _ = json_cli("preflight", str(write_config(text, "bad.yaml")), "--json")
    assert code == 2
    assert {k: report[k] for k in ("ok", "duration_s", "checks")} == {"ok": False, "duration_s": 0.0, "checks": []}
    assert any(located in str(line) for line in report["errors"]), report  # type: ignore[union-attr]


def test_run_json_on_a_missing_file(tmp_path: Path) -> None:
    code, summary, _ = json_cli("run", str(tmp_path / "nope.yaml"), "--json")
    assert code == 2 and summary["ok"] is False
    assert summary["errors"] == [f"{tmp_path / 'nope.yaml'}: no such file"]
