"""Start-up: what a command costs beyond the libraries it needs (issue 25).

    python benchmarks/startup.py [--repeats 7] [--models 20] [--latency 0.2]

Medians over ``--repeats`` runs of each command in its own process, through the console
script's entry point (pyproject.toml's ``[project.scripts]``), beside two baselines
measured in the same run: ``python -c pass`` and a bare ``python -c "import <the
libraries that command needs>"``. The "genwire's share" column is the command minus its
library baseline: what genwire's own modules, wiring and output cost.

* ``--version`` / ``--help``: click only. Target: within 0.12 s of ``python -c pass``.
* ``validate`` of examples/retrieval/genwire.yaml: pydantic, dependency-injector (its
  providers module, which itself loads asyncio and pydantic-settings), PyYAML, Jinja2.
  Target: within 0.15 s of those imports.
* ``preflight`` of N chat models against the fake server in another process at
  ``--latency``: those libraries plus aiohttp, plus one probe time. Target: within
  0.25 s of (imports + latency). The happy case.
* The imperfect case: ``preflight`` where one model of the N never answers within
  ``preflight.timeout_s`` (0.5 s): the command costs the timeout, not more.

Other processes loading the machine widen every row alike; the shares are differences
measured in the same run, so they stay comparable.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from genwire.testing.serve import served

ROOT = Path(__file__).parent.parent
RETRIEVAL = ROOT / "examples" / "retrieval" / "genwire.yaml"
VALIDATE_LIBS = "pydantic, dependency_injector.providers, yaml, jinja2"  # the providers module: what genwire uses
PREFLIGHT_LIBS = VALIDATE_LIBS + ", aiohttp"


def genwire_cmd(*args: str | Path) -> list[str]:
    """``genwire ARGS`` exactly as pip's console script runs it (without a shell shim)."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, function = scripts["genwire"].split(":")
    argv = ["genwire", *map(str, args)]
    return [sys.executable, "-c", f"import sys; sys.argv = {argv!r}; from {module} import {function}; {function}()"]


def median_wall(cmd: Sequence[str], repeats: int, ok_codes: tuple[int, ...] = (0,)) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=RETRIEVAL.parent)
        times.append(time.perf_counter() - started)
        if proc.returncode not in ok_codes:
            raise SystemExit(f"{cmd[-1][:80]}... exited {proc.returncode}: {proc.stderr[-2000:]}")
    return statistics.median(times)


def preflight_config(url: str, n: int, *, silent: str | None = None) -> dict[str, Any]:
    """N chat models, one llm-text column each. ``silent``: the base URL of a server that
    accepts connections but answers too late (the imperfect case's last model)."""
    providers: dict[str, Any] = {"srv": {"kind": "openai", "base_url": url, "api_key": "sk-x", "max_concurrency": n}}
    models = {f"m{i}": {"provider": "srv", "model": f"model-{i}", "kind": "chat"} for i in range(n)}
    if silent is not None:
        providers["late"] = {"kind": "openai", "base_url": silent, "api_key": "sk-x", "retries": 0}
        models[f"m{n - 1}"]["provider"] = "late"
    return {
        "providers": providers,
        "models": models,
        "preflight": {"concurrency": 128, "timeout_s": 0.5, "deadline_s": 5},
        "pipeline": {
            "columns": [
                {"name": f"c{i}", "generator": "llm-text", "resources": {"model": f"m{i}"}, "params": {"prompt": "x"}}
                for i in range(n)
            ]
        },
    }


def row(name: str, took: float, base_name: str, base: float, target: float | None = None) -> None:
    share = took - base
    verdict = "" if target is None else ("  ok" if share <= target else f"  OVER (target {target:.2f} s)")
    print(f"| {name:<40} | {took:7.3f} | {base_name:<44} | {base:7.3f} | {share:+7.3f}{verdict} |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args(argv)
    r, n, lat = args.repeats, args.models, args.latency

    py = [sys.executable]
    with (
        tempfile.TemporaryDirectory() as tmp,
        served("--latency", str(lat)) as url,
        served("--latency", "5.0") as late_url,
    ):
        happy = Path(tmp) / "happy.yaml"
        happy.write_text(json.dumps(preflight_config(url, n)), encoding="utf-8")
        late = Path(tmp) / "late.yaml"
        late.write_text(json.dumps(preflight_config(url, n, silent=late_url)), encoding="utf-8")
        for cmd in (genwire_cmd("--version"), genwire_cmd("validate", RETRIEVAL), genwire_cmd("preflight", happy)):
            subprocess.run(cmd, capture_output=True, cwd=RETRIEVAL.parent)  # warm: bytecode, the OS file cache

        # Interleaved in one run so that load from other processes hits all rows alike.
        bare = median_wall([*py, "-c", "pass"], r)
        click_only = median_wall([*py, "-c", "import click"], r)
        version = median_wall(genwire_cmd("--version"), r)
        helps = median_wall(genwire_cmd("--help"), r)
        validate_libs = median_wall([*py, "-c", f"import {VALIDATE_LIBS}"], r)
        validate = median_wall(genwire_cmd("validate", RETRIEVAL), r)
        preflight_libs = median_wall([*py, "-c", f"import {PREFLIGHT_LIBS}"], r)
        preflight = median_wall(genwire_cmd("preflight", happy, "--no-cache"), r)
        preflight_json = median_wall(genwire_cmd("preflight", happy, "--no-cache", "--json"), r)
        preflight_late = median_wall(genwire_cmd("preflight", late, "--no-cache"), r, ok_codes=(1,))

    print(f"start-up medians over {r} runs (s); python {sys.version.split()[0]}; {n} models at {lat * 1000:.0f} ms")
    print(f"| {'command':<40} | {'median':>7} | {'baseline':<44} | {'median':>7} | {'share':>7} |")
    print(f"|{'-' * 42}|{'-' * 9}|{'-' * 46}|{'-' * 9}|{'-' * 9}|")
    row("python -c 'import click'", click_only, "python -c pass", bare)
    row("genwire --version", version, "python -c pass", bare, 0.12)
    row("genwire --help", helps, "python -c pass", bare, 0.12)
    row("genwire validate (retrieval example)", validate, f"import {VALIDATE_LIBS}"[:44], validate_libs, 0.15)
    row(
        f"genwire preflight ({n} models, {lat * 1000:.0f} ms)",
        preflight,
        f"import ...+aiohttp, + {lat:.1f} s probe",
        preflight_libs + lat,
        0.25,
    )
    row(
        "  the same with --json (no table)",
        preflight_json,
        f"import ...+aiohttp, + {lat:.1f} s probe",
        preflight_libs + lat,
        0.25,
    )
    row(
        f"preflight, 1 of {n} silent (0.5 s timeout)",
        preflight_late,
        "import ...+aiohttp, + 0.5 s timeout",
        preflight_libs + 0.5,
        0.25,
    )


if __name__ == "__main__":
    main()
