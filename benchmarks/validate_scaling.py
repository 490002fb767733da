"""Cold `genwire validate` wall time on a 3-model config and on a generated config of
1,000 models and 1,000 columns, beside the cost of starting Python and of parsing the
same YAML with PyYAML alone; then boot + close of a container with 400 resources beside
dependency-injector's own init_resources()/shutdown_resources() on 400 Resource providers
(the quadratic shutdown trap genwire designs around).

    python benchmarks/validate_scaling.py [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
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


def wall(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - started)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return statistics.median(times)


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
    _ = yaml


if __name__ == "__main__":
    main()
