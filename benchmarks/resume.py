"""Resume after kill -9: a 2,000-row run is killed at about half, then rerun.

Prints the requests the second run sent against the rows that were left (ideal: equal,
plus the one pre-flight probe), and the resumed run's wall time against a fresh run's,
both measured here against the fake server.

    python benchmarks/resume.py [--rows 2000] [--latency 0.02]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from genwire.engine.records.checkpoint import checkpoint_dir, kept_rows
from genwire.testing import FakeOpenAIServer


def config(url: str, rows: int, out: Path) -> dict[str, Any]:
    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": 16}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        # Off: this measures resume alone (the fresh baseline would otherwise be all cache hits).
        "cache": {"enabled": False},
        "pipeline": {
            "num_records": rows,
            "output": str(out),
            "columns": [
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {
                    "name": "text",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "Write about {{ uid }}"},
                },
            ],
        },
    }


def command(path: Path) -> list[str]:
    return [sys.executable, "-m", "genwire.cli.main", "run", str(path)]


def timed_run(path: Path) -> float:
    started = time.perf_counter()
    subprocess.run(command(path), check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.02)
    args = parser.parse_args()
    with FakeOpenAIServer(latency=args.latency) as server, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        out = root / "out.jsonl"
        path = root / "genwire.yaml"
        path.write_text(yaml.safe_dump(config(server.url, args.rows, out)))
        directory = checkpoint_dir(out)

        proc = subprocess.Popen(command(path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while kept_rows(directory) < args.rows // 2 and proc.poll() is None:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kept = kept_rows(directory)
        first_requests = server.requests["writer"]

        server.reset_stats()
        resumed_s = timed_run(path)
        resumed_requests = server.requests["writer"]
        rows = sum(1 for _ in out.open())

        fresh = root / "fresh.yaml"
        fresh.write_text(yaml.safe_dump(config(server.url, args.rows, root / "fresh.jsonl")))
        fresh_s = timed_run(fresh)

    left = args.rows - kept
    in_flight_lost = first_requests - 1 - kept  # sent before the kill, never checkpointed
    print(f"{args.rows} rows, llm-text at {args.latency * 1000:.0f} ms, max_concurrency 16, kill -9 at ~half")
    print(f"{'rows kept at the kill':<42}{kept:>10}")
    print(f"{'requests lost with the killed process':<42}{in_flight_lost:>10}  (in flight, not yet checkpointed)")
    print(f"{'rows left':<42}{left:>10}")
    print(f"{'requests sent by the resumed run':<42}{resumed_requests:>10}  (= rows left + 1 probe: {left + 1})")
    print(f"{'rows in the final output':<42}{rows:>10}")
    print(f"{'wall time, resumed run':<42}{resumed_s:>9.2f}s")
    print(f"{'wall time, fresh run (baseline)':<42}{fresh_s:>9.2f}s  ({resumed_s / fresh_s:.0%} of it)")


if __name__ == "__main__":
    main()
