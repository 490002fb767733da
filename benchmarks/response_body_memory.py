"""Peak memory of a run whose server sends huge bodies: ``max_response_mb`` bounds it.

    python benchmarks/response_body_memory.py [--pad-mb 800] [--rows 4]

A fake server in its own process answers every request after ``--pad-mb`` MiB of JSON
whitespace; ``genwire run`` (a 4-row, 4-in-flight chat pipeline, pre-flight skipped) is
measured with ``/usr/bin/time`` (peak RSS of the genwire process). Cases: the baseline of
plain answers (happy case), then the padded bodies with the default limit and with a
32 MB limit (imperfect cases: every row fails as bad_response). Peak RSS is about
``max_concurrency x max_response_mb`` above the baseline. Run it with
``PYTHONPATH=<an older checkout>`` to measure a genwire without the limit (its config
rejects ``max_response_mb``, so only the default case applies there).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from genwire.testing.serve import served


def measure(root: Path, url: str, rows: int, limit_mb: float | None) -> tuple[float, float, int]:
    provider = {"kind": "openai", "base_url": url, "timeout_s": 600, "retries": 0, "max_concurrency": 4}
    if limit_mb is not None:
        provider["max_response_mb"] = limit_mb
    cfg = {
        "providers": {"srv": provider},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "pipeline": {
            "num_records": rows,
            "batch_size": rows,
            "output": str(root / "out.jsonl"),
            "columns": [
                {"name": "q", "generator": "llm-text", "resources": {"model": "writer"}, "params": {"prompt": "hi"}}
            ],
        },
    }
    config = root / "genwire.yaml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    command = [sys.executable, "-m", "genwire.cli.main", "run", str(config), "--skip-preflight", "--fresh"]
    started = time.perf_counter()
    done = subprocess.run(
        ["/usr/bin/time", "-f", "peak-kb %M", *command, "--no-response-cache"], capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    match = re.search(r"peak-kb (\d+)", done.stderr)
    assert match, done.stderr[-2000:]
    return int(match.group(1)) / 1024, seconds, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pad-mb", type=float, default=800.0)
    parser.add_argument("--rows", type=int, default=4)
    args = parser.parse_args()
    print(f"{'case':<44}{'peak RSS MiB':>13}{'seconds':>9}{'exit':>6}")
    cases: list[tuple[str, float, float | None]] = [
        ("plain answers (baseline)", 0.0, None),
        (f"{args.pad_mb:g} MiB bodies, default limit", args.pad_mb, None),
        (f"{args.pad_mb:g} MiB bodies, max_response_mb: 32", args.pad_mb, 32.0),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name, pad_mb, limit_mb in cases:
            with served("--pad-mb", str(pad_mb)) as url:
                peak, seconds, code = measure(Path(tmp), url, args.rows, limit_mb)
            print(f"{name:<44}{peak:>13.0f}{seconds:>9.1f}{code:>6}")
    print(f"(genwire from {os.environ.get('PYTHONPATH') or 'the installed package'})")


if __name__ == "__main__":
    main()
