"""Start-up: what a command costs beyond the libraries it needs (issue 25).

    python benchmarks/startup.py [--repeats 7] [--models 20] [--latency 0.2] [--cold | --cold-all]

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
  ``--latency``: those libraries plus httptools (the lean client of an http:// endpoint;
  aiohttp only for https://), plus one probe time. Target: within
  0.25 s of (imports + latency). The happy case.
* The imperfect case: ``preflight`` where one model of the N never answers within
  ``preflight.timeout_s`` (0.5 s): the command costs the timeout, not more.

Other processes loading the machine widen every row alike; the shares are differences
measured in the same run, so they stay comparable. On a busy machine the wall-clock
figures still swing with the load: the CPU columns (user + system time of the command's
process, from ``wait4``) are what load disturbs least, and their share is the better
figure to compare a change by.

Bytecode, three ways (the header line says which was measured):

* default, warm: the warm-up writes genwire's bytecode (``PYTHONDONTWRITEBYTECODE`` is
  dropped from the commands' environment), as every run after a checkout's first.
* ``--cold``: a fresh clone. genwire's package is copied to a temporary directory without
  any ``__pycache__`` and put first on ``PYTHONPATH``, with ``PYTHONDONTWRITEBYTECODE=1``:
  every command compiles each of genwire's modules it imports, as a fresh clone's first
  run does (and every run, where the environment sets ``PYTHONDONTWRITEBYTECODE``). The
  installed libraries keep the bytecode pip wrote when it installed them.
* ``--cold-all``: no bytecode for anything (``PYTHONDONTWRITEBYTECODE=1`` and an empty
  ``PYTHONPYCACHEPREFIX``): the libraries compile too, baselines included, and so do
  those only genwire needs (click above all), which widen genwire's share. No install
  leaves a machine so; it bounds the cost from above.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
PREFLIGHT_LIBS = VALIDATE_LIBS + ", httptools"  # an http:// endpoint: the lean client, no aiohttp


def genwire_cmd(*args: str | Path) -> list[str]:
    """``genwire ARGS`` exactly as pip's console script runs it (without a shell shim)."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, function = scripts["genwire"].split(":")
    argv = ["genwire", *map(str, args)]
    return [sys.executable, "-c", f"import sys; sys.argv = {argv!r}; from {module} import {function}; {function}()"]


ENV: dict[str, str] = dict(os.environ)  # the commands' environment (--cold changes it)
CPU: dict[str, float] = {}  # median CPU time of each command measured, by its text


def fresh_clone(where: Path) -> None:
    """genwire's package copied to ``where`` without bytecode, first on the commands'
    PYTHONPATH, and no process writes bytecode: each command compiles genwire afresh.
    (Its entry points still come from the installed distribution: they name modules,
    which the copy provides.)"""
    shutil.copytree(ROOT / "genwire", where / "genwire", ignore=shutil.ignore_patterns("__pycache__"))
    path = os.pathsep.join(filter(None, [str(where), ENV.get("PYTHONPATH")]))
    ENV.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=path)
    imported = subprocess.run(
        [sys.executable, "-c", "import genwire; print(genwire.__file__)"],
        env=ENV,
        cwd=RETRIEVAL.parent,  # where the commands run
        capture_output=True,
        text=True,
    ).stdout.strip()
    if not imported.startswith(str(where)):
        raise SystemExit(f"--cold: the commands would import genwire from {imported}, not the fresh copy")


def median_wall(cmd: Sequence[str], repeats: int, ok_codes: tuple[int, ...] = (0,)) -> float:
    """The median wall time of ``cmd``; its median CPU time goes to ``CPU``."""
    times, cpus = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=RETRIEVAL.parent, env=ENV, text=True
        )
        stderr = proc.stderr.read() if proc.stderr is not None else ""
        _, status, usage = os.wait4(proc.pid, 0)
        times.append(time.perf_counter() - started)
        cpus.append(usage.ru_utime + usage.ru_stime)
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code  # reaped here: Popen must not wait for it again
        if code not in ok_codes:
            raise SystemExit(f"{cmd[-1][:80]}... exited {code}: {stderr[-2000:]}")
    CPU[" ".join(cmd)] = statistics.median(cpus)
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


def row(
    name: str, took: float, base_name: str, base: float, target: float | None = None, cpu: float = 0.0
) -> None:
    """One command against its baseline: wall medians, the share, its verdict, and the
    share in CPU time (``cpu``: the command's CPU median minus its baseline's)."""
    share = took - base
    verdict = "" if target is None else ("ok" if share <= target else f"OVER {target:.2f}")
    print(f"| {name:<40} | {took:7.3f} | {base_name:<44} | {base:7.3f} | {share:+7.3f} | {verdict:<9} | {cpu:+9.3f} |")


def cpu_share(cmd: Sequence[str], base_cmd: Sequence[str]) -> float:
    return CPU[" ".join(cmd)] - CPU[" ".join(base_cmd)]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--models", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.2)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--cold", action="store_true", help="a fresh clone: genwire's modules have no bytecode")
    mode.add_argument("--cold-all", action="store_true", help="no bytecode for genwire or any library")
    args = parser.parse_args(argv)
    r, n, lat = args.repeats, args.models, args.latency

    py = [sys.executable]
    with (
        tempfile.TemporaryDirectory() as tmp,
        served("--latency", str(lat)) as url,
        served("--latency", "5.0") as late_url,
    ):
        if args.cold:
            fresh_clone(Path(tmp) / "clone")
        elif args.cold_all:
            ENV.update(PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX=str(Path(tmp) / "no-pycache"))
        else:
            ENV.pop("PYTHONDONTWRITEBYTECODE", None)  # the warm-up writes genwire's bytecode
        happy = Path(tmp) / "happy.yaml"
        happy.write_text(json.dumps(preflight_config(url, n)), encoding="utf-8")
        late = Path(tmp) / "late.yaml"
        late.write_text(json.dumps(preflight_config(url, n, silent=late_url)), encoding="utf-8")
        for cmd in (genwire_cmd("--version"), genwire_cmd("validate", RETRIEVAL), genwire_cmd("preflight", happy)):
            subprocess.run(cmd, capture_output=True, cwd=RETRIEVAL.parent, env=ENV)  # warm: bytecode, the file cache

        # Interleaved in one run so that load from other processes hits all rows alike.
        bare_cmd, click_cmd = [*py, "-c", "pass"], [*py, "-c", "import click"]
        validate_libs_cmd = [*py, "-c", f"import {VALIDATE_LIBS}"]
        preflight_libs_cmd = [*py, "-c", f"import {PREFLIGHT_LIBS}"]
        version_cmd, help_cmd = genwire_cmd("--version"), genwire_cmd("--help")
        validate_cmd = genwire_cmd("validate", RETRIEVAL)
        preflight_cmd = genwire_cmd("preflight", happy, "--no-cache")
        json_cmd = genwire_cmd("preflight", happy, "--no-cache", "--json")
        late_cmd = genwire_cmd("preflight", late, "--no-cache")
        bare = median_wall(bare_cmd, r)
        click_only = median_wall(click_cmd, r)
        version = median_wall(version_cmd, r)
        helps = median_wall(help_cmd, r)
        validate_libs = median_wall(validate_libs_cmd, r)
        validate = median_wall(validate_cmd, r)
        preflight_libs = median_wall(preflight_libs_cmd, r)
        preflight = median_wall(preflight_cmd, r)
        preflight_json = median_wall(json_cmd, r)
        preflight_late = median_wall(late_cmd, r, ok_codes=(1,))

    state = (
        "cold: a fresh clone, genwire compiled by every command"
        if args.cold
        else "cold: no bytecode for anything"
        if args.cold_all
        else "warm: bytecode cached"
    )
    print(
        f"start-up medians over {r} runs (s); python {sys.version.split()[0]}; {n} models at {lat * 1000:.0f} ms; "
        f"{state}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"| {'command':<40} | {'median':>7} | {'baseline':<44} | {'median':>7} | {'share':>7} | {'budget':<9} "
        f"| {'CPU share':>9} |"
    )
    print(f"|{'-' * 42}|{'-' * 9}|{'-' * 46}|{'-' * 9}|{'-' * 9}|{'-' * 11}|{'-' * 11}|")
    row("python -c 'import click'", click_only, "python -c pass", bare, cpu=cpu_share(click_cmd, bare_cmd))
    row("genwire --version", version, "python -c pass", bare, 0.12, cpu_share(version_cmd, bare_cmd))
    row("genwire --help", helps, "python -c pass", bare, 0.12, cpu_share(help_cmd, bare_cmd))
    row(
        "genwire validate (retrieval example)",
        validate,
        f"import {VALIDATE_LIBS}"[:44],
        validate_libs,
        0.15,
        cpu_share(validate_cmd, validate_libs_cmd),
    )
    probe = f"import ...+httptools, + {lat:.1f} s probe"
    preflight_cpu = cpu_share(preflight_cmd, preflight_libs_cmd)
    name = f"genwire preflight ({n} models, {lat * 1000:.0f} ms)"
    row(name, preflight, probe, preflight_libs + lat, 0.25, preflight_cpu)
    json_cpu = cpu_share(json_cmd, preflight_libs_cmd)
    row("  the same with --json (no table)", preflight_json, probe, preflight_libs + lat, 0.25, json_cpu)
    row(
        f"preflight, 1 of {n} silent (0.5 s timeout)",
        preflight_late,
        "import ...+httptools, + 0.5 s timeout",
        preflight_libs + 0.5,
        0.25,
        cpu_share(late_cmd, preflight_libs_cmd),
    )


if __name__ == "__main__":
    main()
