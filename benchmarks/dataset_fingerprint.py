"""What the checkpoint's dataset fingerprint costs: a content hash against the baseline of
size and mtime (what genwire recorded before 0.3, and what ``cp -p`` fools).

    python benchmarks/dataset_fingerprint.py [--mb 1024] [--files 5000]

Happy case: one large file (``--mb`` MiB), read from the page cache (a file just written
or just read by the run's pre-flight). Imperfect case: a documents folder of ``--files``
small files, where opening each file costs more than hashing it. Also BLAKE2b next to
SHA-256 (genwire uses SHA-256: the CPU's SHA instructions make it faster here).
Numbers vary with other load on the machine; run it on an idle one.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from genwire.engine.records import fingerprint

CHUNK = 1 << 20


def size_and_mtime(path: Path) -> Any:
    """The baseline: what the fingerprint recorded before it held content."""
    if path.is_dir():
        return [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(path.rglob("*")) if p.is_file()]
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def blake2b(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=32)
    with path.open("rb", buffering=0) as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def best_of(runs: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="size of the large file, MiB")
    parser.add_argument("--files", type=int, default=5000, help="small files in the documents folder")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "big.jsonl"
        with big.open("wb") as handle:
            block = os.urandom(CHUNK)
            for _ in range(args.mb):
                handle.write(block)
        folder = Path(tmp) / "docs"
        folder.mkdir()
        for i in range(args.files):
            (folder / f"doc{i:05d}.md").write_bytes(os.urandom(2000))

        state = fingerprint._file_state  # what the fingerprint does per dataset path
        rows = [
            (f"one {args.mb} MiB file", big, [("size+mtime", size_and_mtime), ("sha256", state), ("blake2b", blake2b)]),
            (f"{args.files} files of 2 kB", folder, [("size+mtime", size_and_mtime), ("sha256", state)]),
        ]
        print(f"{'case':<26}{'method':<12}{'seconds':>9}{'extra s':>9}{'s per GB':>10}")
        for case, path, methods in rows:
            size = sum(p.stat().st_size for p in path.rglob("*")) if path.is_dir() else path.stat().st_size
            baseline = 0.0
            for method, work in methods:
                seconds = best_of(args.runs, lambda w=work, p=path: w(p))  # type: ignore[misc]
                baseline = baseline or seconds
                per_gb = seconds / (size / 1e9)
                print(f"{case:<26}{method:<12}{seconds:>9.3f}{seconds - baseline:>9.3f}{per_gb:>10.2f}")


if __name__ == "__main__":
    main()
