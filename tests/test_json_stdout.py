"""Under ``--json`` stdout holds exactly one JSON object, whatever plugins print (issue 33
item 13): print() at import and in generate(), sys.stdout.write, a thread, a write to file
descriptor 1, sys.__stdout__ and a child process all end on stderr."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from support import cli

NOISY = """\
import os
import subprocess
import sys
import threading

from genwire.generators import Generator, GeneratorMetadata

print("IMPORT-PRINT")
_stdout_at_import = sys.stdout


class Noisy(Generator):
    metadata = GeneratorMetadata(name="noisy", description="prints", required_resources={})

    async def generate(self, rows):
        print("GENERATE-PRINT")
        sys.stdout.write("STDOUT-WRITE\\n")
        _stdout_at_import.write("IMPORT-REFERENCE\\n")
        _stdout_at_import.flush()
        thread = threading.Thread(target=lambda: print("THREAD-PRINT", flush=True))
        thread.start()
        thread.join()
        os.write(1, b"FD-WRITE\\n")
        sys.__stdout__.write("DUNDER-STDOUT\\n")
        sys.__stdout__.flush()
        subprocess.run([sys.executable, "-c", "print('CHILD-PRINT')"], check=True)
        return ["x" for _ in rows]
"""
PRINTED = [
    "IMPORT-PRINT",
    "GENERATE-PRINT",
    "STDOUT-WRITE",
    "IMPORT-REFERENCE",
    "THREAD-PRINT",
    "FD-WRITE",
    "DUNDER-STDOUT",
    "CHILD-PRINT",
]


@pytest.fixture
def noisy_env(install_plugin: Callable[..., None], tmp_path: Path) -> dict[str, str]:
    install_plugin("noisy-plugin", "noisy_plugin", NOISY, {"noisy": "noisy_plugin:Noisy"})
    site = str(tmp_path / "site-noisy-plugin")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p)}


def config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "genwire.yaml"
    path.write_text(
        f"pipeline:\n  output: {tmp_path / 'out.jsonl'}\n  columns:\n    - {{name: c, generator: noisy}}\n{extra}",
        encoding="utf-8",
    )
    return path


def test_what_a_plugin_prints_during_a_json_run_goes_to_stderr(tmp_path: Path, noisy_env: dict[str, str]) -> None:
    result = cli("run", config(tmp_path), "-n", "2", "--json", env=noisy_env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)  # exactly one object: nothing before or after it
    assert summary["ok"] is True and summary["rows_written"] == 2
    for text in PRINTED:
        assert text in result.stderr, text
    # The run itself is untouched: without --json stdout is the human output, prints included
    # (--fresh: the same command over the finished output would only say it is complete).
    plain = cli("run", config(tmp_path), "-n", "2", "--fresh", env=noisy_env)
    assert plain.returncode == 0 and "GENERATE-PRINT" in plain.stdout and "dataset written to" in plain.stdout


def test_a_json_failure_after_plugin_prints_is_still_one_object(tmp_path: Path, noisy_env: dict[str, str]) -> None:
    broken = config(tmp_path, "    - {name: d, generator: no-such-generator}\n")  # found missing after the import
    for command in (["run", broken, "--json"], ["preflight", broken, "--json"]):
        result = cli(*command, env=noisy_env)
        assert result.returncode == 2, result.stderr
        assert json.loads(result.stdout)["ok"] is False
        assert "IMPORT-PRINT" in result.stderr


def test_a_json_preflight_of_a_printing_plugin_is_one_object(tmp_path: Path, noisy_env: dict[str, str]) -> None:
    result = cli("preflight", config(tmp_path), "--json", env=noisy_env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True
    assert "IMPORT-PRINT" in result.stderr
