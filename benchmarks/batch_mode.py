"""Batch-API mode against online generation, measured here against the fake server.

A pipeline of two chat columns (the second reads the first) runs as a real
``genwire run`` process: online, then ``--batch`` (the fake's batches complete at once),
then ``--batch`` with the first two batches expiring after half their lines (the
imperfect case: their other half is resubmitted), and a ``--batch`` run ten times larger. Each line gives wall
time, the run process's peak RSS (VmHWM from /proc, polled), online requests, lines in
batches and batches. Memory in batch mode should stay flat in the rows: the big run's
peak against the 10,000-row run's. Wall time in batch mode is bound by polling and
rounds here; against a real provider it is bound by the completion window (hours), at
half the price.

    python benchmarks/batch_mode.py [--rows 10000] [--big-rows 100000] [--latency 0.001]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from genwire.testing import FakeOpenAIServer


def config(url: str, rows: int, out: Path) -> dict[str, Any]:
    return {
        "providers": {
            "srv": {
                "kind": "openai",
                "base_url": url,
                "max_concurrency": 32,
                "batch": {"poll_interval_s": 0.5},
            }
        },
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "defaults": {"chat_model": "writer"},
        "cache": {"enabled": False},  # each run pays for every answer: no run helps the next
        "pipeline": {
            "num_records": rows,
            "output": str(out),
            "batch_size": 64,
            "columns": [
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {"name": "first", "generator": "llm-text", "params": {"prompt": "Write about {{ uid }}"}},
                {"name": "second", "generator": "llm-text", "params": {"prompt": "Summarise {{ first }}"}},
            ],
            "max_failure_rate": 0.0,
        },
    }


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def measured_run(path: Path, *extra: str) -> tuple[float, float]:
    """Wall time and peak RSS (MB) of one ``genwire run`` process."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "genwire.cli.main", "run", str(path), "--fresh", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, peak_rss_mb(proc.pid))
        time.sleep(0.05)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"run failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, peak


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--big-rows", type=int, default=100_000)
    parser.add_argument("--latency", type=float, default=0.001, help="online answer latency (s)")
    args = parser.parse_args()

    print(
        f"{'case':<34} {'rows':>8} {'wall s':>8} {'peak MB':>8} {'online':>8} {'batched':>8} {'batches':>8}", flush=True
    )
    with FakeOpenAIServer(latency=args.latency) as server, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        peaks: dict[str, float] = {}
        cases = [
            ("online (baseline)", args.rows, ()),
            ("batch, instant completion", args.rows, ("--batch",)),
            ("batch, 2 batches expire half done", args.rows, ("--batch",)),
            ("batch, instant completion", args.big_rows, ("--batch",)),
        ]
        for name, rows, extra in cases:
            path = root / f"{rows}.yaml"
            path.write_text(yaml.safe_dump(config(server.url, rows, root / f"{rows}.jsonl")), encoding="utf-8")
            server.reset_stats()
            if "expire" in name:
                server.batches.expire_next(0.5, count=2)
            wall, peak = measured_run(path, *extra)
            server.batches.clear()
            peaks[f"{name} {rows}"] = peak
            print(
                f"{name:<34} {rows:>8,} {wall:>8.1f} {peak:>8.0f} {server.total_requests:>8,} "
                f"{sum(server.batches.lines.values()):>8,} {server.batches.created:>8,}",
                flush=True,
            )
        small = peaks[f"batch, instant completion {args.rows}"]
        big = peaks[f"batch, instant completion {args.big_rows}"]
        print(
            f"\nbatch mode peak RSS: {small:.0f} MB at {args.rows:,} rows, {big:.0f} MB at {args.big_rows:,} rows "
            f"({big / small:.2f}x for {args.big_rows / args.rows:.0f}x the rows)"
        )


if __name__ == "__main__":
    main()
