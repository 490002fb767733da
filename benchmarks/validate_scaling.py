"""Cold `genwire validate` wall time on a 3-model config and on a generated config of
1,000 models and 1,000 columns, beside the cost of starting Python and of parsing the
same YAML with PyYAML alone; then boot + close of a container with 400 resources beside
dependency-injector's own init_resources()/shutdown_resources() on 400 Resource providers
(the quadratic shutdown trap genwire designs around). Then the static check of plugin
code (SPEC §15): `genwire validate` of the retrieval example and of configs using 1 and 50
plugin generators (one module each, installed with an entry point), with the check (disk
cache cold, then warm) against the same command with the check switched off, and 50
plugins that each use an undeclared slot (validate exits 2) as the imperfect case; and the
check alone in-process: parsing every file vs the per-file cache.

    python benchmarks/validate_scaling.py [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

SMALL = """\
providers:
  nim: {kind: openai, base_url: "https://integrate.api.nvidia.com/v1"}
models:
  writer: {provider: nim, model: meta/llama-3.1-8b-instruct, kind: chat}
  judge: {provider: nim, model: meta/llama-3.1-70b-instruct, kind: chat}
  embedder: {provider: nim, model: nvidia/nv-embedqa-e5-v5, kind: embedding, dimensions: 1024}
pipeline:
  columns:
    - {name: topic, generator: sampler, params: {kind: category, values: [a, b]}}
    - {name: q, generator: llm-text, resources: {model: writer}, params: {prompt: "About {{ topic }}"}}
    - {name: v, generator: embedding, resources: {model: embedder}, params: {column: q}}
"""


def large_config(n: int) -> str:
    lines = ["providers:", '  nim: {kind: openai, base_url: "https://integrate.api.nvidia.com/v1"}', "models:"]
    lines += [
        f"  m{i}: {{provider: nim, model: model-{i}, kind: {'chat' if i % 2 else 'embedding'}}}" for i in range(n)
    ]
    lines += ["pipeline:", "  columns:", "    - {name: t, generator: sampler, params: {kind: uuid}}"]
    for i in range(n - 1):
        if i % 2:
            prompt = '{prompt: "{{ t }}"}'
            lines.append(f"    - {{name: c{i}, generator: llm-text, resources: {{model: m{i}}}, params: {prompt}}}")
        else:
            lines.append(
                f"    - {{name: c{i}, generator: embedding, resources: {{model: m{i}}}, params: {{column: t}}}}"
            )
    return "\n".join(lines) + "\n"


def wall(
    cmd: list[str], runs: int, *, env: dict[str, str] | None = None, expect: int = 0, fresh_cache: bool = False
) -> float:
    times = []
    for _ in range(runs):
        run_env = dict(env or os.environ)
        with tempfile.TemporaryDirectory() as cache:
            if fresh_cache:  # an empty cache directory: the first validate after an install or an edit
                run_env["XDG_CACHE_HOME"] = cache
            started = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=run_env)
            times.append(time.perf_counter() - started)
        if proc.returncode != expect:
            raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}, not {expect}:\n{proc.stderr}")
    return statistics.median(times)


PLUGIN = """\
from pydantic import BaseModel
from genwire.generators import Generator, GeneratorMetadata, ResourceKind


class Params(BaseModel):
    column: str
    retries: int = 2


class Plugin{i}(Generator[Params]):
    metadata = GeneratorMetadata(
        name="plugin-{i}",
        description="a judged rewrite, as a plugin would write it",
        required_resources={{"writer": ResourceKind.CHAT_MODEL, "embedder": ResourceKind.EMBEDDING_MODEL}},
    )
    params_model = Params

    @classmethod
    def reads(cls, params):
        return {{params.column}}

    async def generate(self, rows):
        out = []
        for row in rows:
            text = await self.resources.writer.complete(str(row[self.params.column]))
            for _ in range(self.params.retries):
                if text.strip():
                    break
                text = await self.resources.{rare}.complete("again: " + text)
            vector = (await self.resources["embedder"].embed([text]))[0]
            out.append({{"text": text, "norm": sum(v * v for v in vector)}})
        return out
"""


def install_plugins(root: Path, n: int, *, undeclared: bool) -> None:
    """n plugin modules and a dist-info naming each under genwire.generators (what pip installs)."""
    root.mkdir()
    for i in range(n):
        (root / f"bench_plugin_{i}.py").write_text(PLUGIN.format(i=i, rare="judge" if undeclared else "writer"))
    info = root / "bench_plugins-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bench-plugins\nVersion: 1.0\n")
    points = "\n".join(f"plugin-{i} = bench_plugin_{i}:Plugin{i}" for i in range(n))
    (info / "entry_points.txt").write_text(f"[genwire.generators]\n{points}\n")


def plugin_config(n: int) -> str:
    lines = [
        "providers:",
        '  nim: {kind: openai, base_url: "https://integrate.api.nvidia.com/v1"}',
        "models:",
        "  writer: {provider: nim, model: w, kind: chat}",
        "  embedder: {provider: nim, model: e, kind: embedding}",
        "defaults: {chat_model: writer, embedding_model: embedder}",
        "pipeline:",
        "  columns:",
        "    - {name: t, generator: sampler, params: {kind: uuid}}",
    ]
    lines += [f"    - {{name: p{i}, generator: plugin-{i}, params: {{column: t}}}}" for i in range(n)]
    return "\n".join(lines) + "\n"


# `genwire validate` with the check switched off: the baseline the check is measured against.
NO_CHECK = (
    "import sys, genwire.container.wiring as w; w.check_sources = lambda *a: []; "
    "from genwire.cli.main import main; sys.argv[0] = 'genwire'; main()"
)


Variant = tuple[str, list[str], dict[str, str], int, bool]  # label, command, env, exit code, fresh cache


def interleaved(variants: list[Variant], runs: int) -> list[tuple[str, float]]:
    """Median wall time of each variant, run in turn (A B C A B C ...) so that a change of
    load on a shared machine falls on every variant alike."""
    times: dict[str, list[float]] = {label: [] for label, *_ in variants}
    for _ in range(runs):
        for label, cmd, env, code, fresh in variants:
            times[label].append(wall(cmd, 1, env=env, expect=code, fresh_cache=fresh))
    return [(label, statistics.median(t)) for label, t in times.items()]


def check_rows(tmp: Path, runs: int) -> list[tuple[str, float]]:
    py = sys.executable
    example = Path(__file__).resolve().parent.parent / "examples" / "retrieval" / "genwire.yaml"
    env = dict(os.environ)
    # Warm the on-disk cache once, as any earlier validate of the same files would have.
    wall([py, "-m", "genwire.cli.main", "validate", str(example)], 1)
    rows = interleaved(
        [
            (
                "validate the retrieval example, check off",
                [py, "-c", NO_CHECK, "validate", str(example)],
                env,
                0,
                False,
            ),
            (
                "validate the retrieval example, check, cold cache",
                [py, "-m", "genwire.cli.main", "validate", str(example)],
                env,
                0,
                True,
            ),
            (
                "validate the retrieval example, check, warm cache",
                [py, "-m", "genwire.cli.main", "validate", str(example)],
                env,
                0,
                False,
            ),
        ],
        runs,
    )
    for n in (1, 50):
        for undeclared in (False, True) if n == 50 else (False,):
            site = tmp / f"site-{n}-{undeclared}"
            install_plugins(site, n, undeclared=undeclared)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
            config = tmp / f"plugins-{n}.yaml"
            config.write_text(plugin_config(n))
            label = f"validate, {n} plugin generator{'s' if n > 1 else ''}" + (
                ", each undeclared (exit 2)" if undeclared else ""
            )
            code = 2 if undeclared else 0
            validate = [py, "-m", "genwire.cli.main", "validate", str(config)]
            wall(validate, 1, env=env, expect=code)  # warm the on-disk cache
            rows += interleaved(
                [
                    (f"{label}, check off", [py, "-c", NO_CHECK, "validate", str(config)], env, 0, False),
                    (f"{label}, check, cold cache", validate, env, code, True),
                    (f"{label}, check, warm cache", validate, env, code, False),
                ],
                runs,
            )
    return rows


def check_in_process(tmp: Path, runs: int) -> list[tuple[str, float]]:
    """The check alone (median of ``runs``): the example's generators and 1 and 50 plugins,
    every file parsed (an empty cache) vs the disk cache (a new process) vs memory."""
    import shutil

    from genwire.generators import source_check, source_scan
    from genwire.generators.discovery import discover

    sys.path.insert(0, str(tmp / "site-50-False"))
    found = discover().generators
    plugins = [found[f"plugin-{i}"] for i in range(50)]
    cases = [
        ("the example's 4 generators", [found[n] for n in ("seed-dataset", "llm-text", "template", "hard-negatives")]),
        ("1 plugin generator", plugins[:1]),
        ("50 plugin generators", plugins),
    ]
    cache = tmp / "xdg"
    os.environ["XDG_CACHE_HOME"] = str(cache)
    rows = []
    for label, classes in cases:
        times: dict[str, list[float]] = {"nothing cached": [], "disk cache": [], "in-memory cache": []}
        for _ in range(runs):
            shutil.rmtree(cache, ignore_errors=True)
            source_scan._memory.clear()
            for how in times:  # parse and write the disk cache; read it back; memory
                if how == "disk cache":
                    source_scan._memory.clear()
                started = time.perf_counter()
                source_check.check_generators(classes)
                times[how].append(time.perf_counter() - started)
        rows += [(f"check {label}, {how}", statistics.median(t)) for how, t in times.items()]
    return rows


def boot_close(path: Path) -> float:
    import genwire

    async def go() -> None:
        container = genwire.boot(path)
        async with container:
            for target in container.plan().targets:
                container.resource(target.name)  # build every model and its client

    started = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - started


def di_resources(n: int) -> float:
    from dependency_injector import containers, providers

    async def resource() -> object:  # an async resource, like an HTTP client
        return object()

    container = containers.DynamicContainer()
    container.set_providers(**{f"r{i}": providers.Resource(resource) for i in range(n)})

    async def go() -> None:
        await container.init_resources()  # type: ignore[misc]
        await container.shutdown_resources()  # type: ignore[misc]

    started = time.perf_counter()
    asyncio.run(go())
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        small, large, boot400 = Path(tmp) / "small.yaml", Path(tmp) / "large.yaml", Path(tmp) / "b400.yaml"
        small.write_text(SMALL)
        large.write_text(large_config(1000))
        boot400.write_text(large_config(400))
        py = sys.executable
        rows = [
            ("python -c pass (interpreter start)", wall([py, "-c", "pass"], args.runs)),
            (
                "PyYAML yaml.safe_load (pure Python) of the big file",
                wall([py, "-c", f"import yaml; yaml.safe_load(open({str(large)!r}))"], args.runs),
            ),
            (
                "genwire validate, 3 models / 3 columns",
                wall([py, "-m", "genwire.cli.main", "validate", str(small)], args.runs),
            ),
            (
                "genwire validate, 1,000 models / 1,000 columns",
                wall([py, "-m", "genwire.cli.main", "validate", str(large)], args.runs),
            ),
        ]
        print(f"cold wall time, median of {args.runs} runs")
        for name, seconds in rows:
            print(f"  {name:<50} {seconds:7.3f} s")
        print("in-process, 400 resources")
        print(f"  {'dependency-injector init+shutdown_resources (400)':<50} {di_resources(400):7.3f} s")
        print(f"  {'genwire boot + build all + close (400 models)':<50} {boot_close(boot400):7.3f} s")
        print(f"static check of plugin code: cold wall time, median of {args.runs} runs")
        for name, seconds in check_rows(Path(tmp), args.runs):
            print(f"  {name:<68} {seconds:7.3f} s")
        print(f"static check alone, in-process, median of {max(args.runs, 5)} runs")
        for name, seconds in check_in_process(Path(tmp), max(args.runs, 5)):
            print(f"  {name:<68} {seconds * 1000:7.2f} ms")
    _ = yaml


if __name__ == "__main__":
    main()
