"""Batch mode's output lines, bounded: the peak RSS of a ``genwire run --batch`` process
whose batch output holds one huge line, with ``max_response_mb: 1``.

Cases: every line small (the baseline), then one output line of ``--line-mib`` MiB (200 by
default; the issue's figure). The huge line's row fails ("larger than 1 MB") and the rest
are written; its process should peak near the baseline, not near the line's size. Peak
RSS is the process's own (``ru_maxrss`` from ``wait4``).

    python benchmarks/batch_output_memory.py [--line-mib 200] [--rows 20] [--cli-path DIR]

``--cli-path DIR`` runs the ``genwire`` processes from another checkout (e.g. an older
commit's ``git archive``): the same cases, before.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from genwire.testing import FakeOpenAIServer


def config(url: str, root: Path, rows: int) -> dict[str, Any]:
    return {
        "providers": {
            "srv": {
                "kind": "openai",
                "base_url": url,
                "max_response_mb": 1,
                "batch": {"poll_interval_s": 0.05},
            }
        },
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "defaults": {"chat_model": "writer"},
        "cache": {"enabled": False},
        "pipeline": {
            "num_records": rows,
            "seed": 1,
            "max_failure_rate": 1.0,
            "output": str(root / "out.jsonl"),
            "columns": [
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {"name": "text", "generator": "llm-text", "params": {"prompt": "Write about {{ uid }}"}},
            ],
        },
    }


def run(server: FakeOpenAIServer, root: Path, rows: int, line_bytes: int, cli_path: Path | None) -> dict[str, Any]:
    root.mkdir(parents=True)
    path = root / "genwire.yaml"
    path.write_text(yaml.safe_dump(config(server.url, root, rows)), encoding="utf-8")
    server.reset_stats()
    if line_bytes:
        server.batches.oversize_next(line_bytes)
    env = dict(os.environ)
    if cli_path is not None:
        env["PYTHONPATH"] = str(cli_path)
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "genwire.cli.main", "run", str(path), "--batch", "--json", "--skip-preflight"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=root,
        env=env,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    summary = json.loads(out) if out.strip() else {}
    return {
        "exit": proc.returncode,
        "rows_written": summary.get("rows_written"),
        "rows_failed": summary.get("rows_failed"),
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "seconds": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--line-mib", type=float, default=200.0)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--cli-path", type=Path, help="run the genwire processes from this checkout")
    args = parser.parse_args()
    with FakeOpenAIServer() as server, tempfile.TemporaryDirectory() as tmp:
        base = run(server, Path(tmp) / "small", args.rows, 0, args.cli_path)
        huge = run(server, Path(tmp) / "huge", args.rows, int(args.line_mib * 1024 * 1024), args.cli_path)
    for name, result in (("every line small", base), (f"one {args.line_mib:g} MiB line", huge)):
        print(
            f"{name:22s} exit {result['exit']} written {result['rows_written']} failed {result['rows_failed']} "
            f"peak RSS {result['peak_rss_mib']:7.1f} MiB  {result['seconds']:5.1f}s"
        )
    print(f"the huge line costs {huge['peak_rss_mib'] - base['peak_rss_mib']:+.1f} MiB of peak RSS over the baseline")


if __name__ == "__main__":
    main()
