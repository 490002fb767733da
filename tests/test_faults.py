"""Faults under load: nothing lost, nothing duplicated, caps held, memory flat, Ctrl-C clean."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import genwire
from genwire.generators import Generator, GeneratorMetadata
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_server import FakeResponse


class RowIndex(Generator[Any]):
    """The row's index in the run, from the indices the engine passes beside the rows."""

    metadata = GeneratorMetadata(name="row-index", description="the row's index", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self.generate_batch(rows, range(len(rows)))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        return [str(i) for i in indices]


def load_pipeline(url: str, out: Path, n: int, concurrency: int = 32, row_index: bool = True) -> dict[str, Any]:
    """With ``row_index`` (in-process runs only: it is a test plugin), each prompt names its row."""
    index = [{"name": "idx", "generator": "row-index"}] if row_index else []
    return {
        "providers": {
            "srv": {"kind": "openai", "base_url": url, "max_concurrency": concurrency, "backoff_s": 0.01, "retries": 4}
        },
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "pipeline": {
            "num_records": n,
            "output": str(out),
            "max_failure_rate": 0.05,
            "columns": [
                *index,
                {
                    "name": "k",
                    "generator": "sampler",
                    "params": {"kind": "uniform", "low": 0, "high": 99, "integer": True},
                },
                {
                    "name": "text",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "row {{ k }}; id {{ idx }}" if row_index else "row {{ k }};"},
                },
            ],
        },
    }


async def test_2000_rows_with_transient_and_permanent_faults(tmp_path: Path) -> None:
    out = tmp_path / "data.jsonl"
    with FakeOpenAIServer(latency=0.002) as server:
        server.fail_rate(
            "writer", 0.05, statuses=(503, FakeResponse(status=429, headers={"Retry-After": "0"}), "reset"), seed=7
        )
        server.fail_when("writer", "row 7;", 400)  # k == 7: about 1 % of rows, never recoverable
        container = genwire.boot(load_pipeline(server.url, out, 2000), generators=[RowIndex])
        async with container:
            result = await container.run(skip_preflight=True)
        peak, sent = server.peak_in_flight, server.requests["writer"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    errors = [json.loads(line) for line in (tmp_path / "data.jsonl.errors.jsonl").read_text().splitlines()]
    written_ids = [int(r["idx"]) for r in rows]
    failed_ids = [e["row"] for e in errors]
    assert len(written_ids) == len(set(written_ids)) and len(failed_ids) == len(set(failed_ids))  # none twice
    assert sorted(written_ids + failed_ids) == list(range(2000))  # none lost
    assert result.rows_written == len(rows) and result.rows_failed == len(errors) > 0  # summary matches
    assert all(e["data"]["k"] == 7 and e["error_class"] == "bad_response" for e in errors)
    assert not any(r["k"] == 7 for r in rows)
    assert peak <= 32
    retried = sent - 2000
    assert retried > 50  # the transient faults really happened and were retried
    print(f"\nfault run: rows=2000 written={len(rows)} failed={len(errors)} retried={retried} lost=0 peak={peak}")


MEMORY_SCRIPT = textwrap.dedent("""
    import asyncio, resource, sys, genwire
    from genwire.testing import FakeChatModel
    n, out = int(sys.argv[1]), sys.argv[2]
    cfg = {
        "providers": {"srv": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {"writer": {"provider": "srv", "model": "w", "kind": "chat"}},
        "pipeline": {"num_records": n, "output": out, "batch_size": 256, "columns": [
            {"name": "u", "generator": "sampler", "params": {"kind": "uuid"}},
            {"name": "t", "generator": "llm-text", "resources": {"model": "writer"},
             "params": {"prompt": "{{ u }}"}},
        ]},
    }
    async def main():
        container = genwire.boot(cfg)
        async with container:
            with container.override("writer", FakeChatModel(lambda p: p * 40)):
                result = await container.run(skip_preflight=True)
        assert result.rows_written == n
    asyncio.run(main())
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
""")


def peak_rss_kib(n: int, out: Path) -> int:
    proc = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(n), str(out)], capture_output=True, text=True, check=True
    )
    return int(proc.stdout.strip().splitlines()[-1])


def test_memory_stays_flat_as_rows_grow(tmp_path: Path) -> None:
    small = peak_rss_kib(2_000, tmp_path / "small.jsonl")
    large = peak_rss_kib(20_000, tmp_path / "large.jsonl")
    size = (tmp_path / "large.jsonl").stat().st_size
    print(
        f"\npeak RSS: 2,000 rows {small / 1024:.1f} MiB, 20,000 rows {large / 1024:.1f} MiB "
        f"(output {size / 2**20:.1f} MiB)"
    )
    # The 20k output is ~30 MiB; holding it in memory would show. Streaming keeps RSS flat.
    assert large - small < 12 * 1024


def test_sigint_mid_run_exits_promptly_and_cleanly(tmp_path: Path) -> None:
    out = tmp_path / "data.jsonl"
    with FakeOpenAIServer(latency=0.2) as server:
        config = tmp_path / "genwire.yaml"
        config.write_text(
            json.dumps(load_pipeline(server.url, out, 5000, concurrency=8, row_index=False))
        )  # JSON is YAML
        proc = subprocess.Popen(
            [sys.executable, "-m", "genwire.cli.main", "run", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONWARNINGS": "always::ResourceWarning"},
        )
        deadline = time.monotonic() + 30
        while server.requests.get("writer", 0) < 20 and time.monotonic() < deadline:
            time.sleep(0.05)  # wait until generation is under way
        assert server.requests.get("writer", 0) >= 20
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    print(f"\nSIGINT to exit: {took:.2f}s")
    assert proc.returncode == 130, stderr
    assert took < 10  # generous: it guards against a hang (a loaded machine slows the exit, never 10 s)
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert "Unclosed" not in stderr and "ResourceWarning" not in stderr
    assert not out.exists()
    # No temporary file left behind (.genwire holds the response cache, by design).
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".") and p.name != ".genwire"] == []
