"""A gated run at the scale people train on (issue 53): ``--rows`` kept rows of
``n -> question (writer) -> near (keep-near-unique) -> novel (keep-novel)`` against the fake
server (``--latency`` 5 ms answers), each run a fresh ``genwire run`` process.

Per row count: the run's time, candidates/s (against the plain run's rows/s) and peak
RSS (the child's VmHWM, read from /proc while it runs), with keep-novel through its index from ``--index-from``
passed rows. Cases: ``gated`` (the two gates, at concurrency 64 and again at 8: the kept rows must be identical) against
``plain`` (the same pipeline without the gates, the baseline, same run). Questions repeat
(``n`` drawn from 0 .. 1.25 x rows), so the gates reject about a fifth of the candidates.

    python benchmarks/scale_rows.py [--rows 10000 100000] [--latency 0.005] [--index-from N] [--gates novel]
    python benchmarks/scale_rows.py --rows 1000000 --gates novel --values 10 --no-plain  # the 1M run

At 1,000,000 rows the gated run makes about 1.25 M candidates (2.5 M requests): hours on a
loaded 2-core machine; 100,000 rows takes minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from genwire.testing import FakeOpenAIServer

GATES = ("near", "novel")
CHOICES = (*GATES, "if")  # keep-if: a gate that keeps no state (the run's own memory, alone)


def pipeline(
    url: str,
    root: Path,
    rows: int,
    concurrency: int,
    index_from: int,
    *,
    gated: bool,
    gates: tuple[str, ...] = GATES,
    values: float = 1.25,
) -> dict[str, Any]:
    columns: list[dict[str, Any]] = [
        {
            "name": "n",
            "generator": "sampler",
            "params": {"kind": "uniform", "low": 0, "high": int(rows * values), "integer": True},
        },
        {
            "name": "question",
            "generator": "llm-text",
            "resources": {"model": "writer"},
            "params": {"prompt": "Question about {{ n }}"},
        },
    ]
    if gated and "near" in gates:
        columns.append({"name": "near", "generator": "keep-near-unique", "params": {"column": "question"}})
    if gated and "if" in gates:
        columns.append({"name": "ok", "generator": "keep-if", "params": {"expression": "n % 10 != 3"}})
    if gated and "novel" in gates:
        columns += [
            {
                "name": "novel",
                "generator": "keep-novel",
                "resources": {"model": "embedder"},
                "params": {"column": "question", **({"index_from": index_from} if index_from else {})},
            },
        ]
    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "api_key": "k", "max_concurrency": concurrency}},
        "models": {
            "writer": {"provider": "srv", "model": "writer", "kind": "chat"},
            "embedder": {"provider": "srv", "model": "embedder", "kind": "embedding"},
        },
        "pipeline": {
            "num_records": rows,
            "max_candidates": rows * 4,
            "seed": 1,
            "batch_size": 64,
            "output": str(root / "out.jsonl"),
            "columns": columns,
        },
    }


class PeakRss:
    """The highest VmHWM of process ``pid`` (its own peak RSS, in MB), read every 20 ms
    from /proc until ``stop`` (0 where there is no /proc)."""

    def __init__(self, pid: int) -> None:
        self._path = Path(f"/proc/{pid}/status")
        self._peak = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.is_set():
            try:
                for line in self._path.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self._peak = max(self._peak, int(line.split()[1]) / 1024)
            except (OSError, ValueError):
                return
            self._done.wait(0.02)

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return self._peak


def run(
    url: str,
    rows: int,
    concurrency: int,
    index_from: int,
    *,
    gated: bool,
    gates: tuple[str, ...] = GATES,
    values: float = 1.25,
) -> tuple[float, float, str, int]:
    """(seconds, peak RSS MB, sha256 of the output, candidates) of one fresh run."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        config = root / "genwire.yaml"
        cfg = pipeline(url, root, rows, concurrency, index_from, gated=gated, gates=gates, values=values)
        config.write_text(yaml.safe_dump(cfg))
        out, err = root / "stdout", root / "stderr"
        started = time.perf_counter()
        with out.open("w") as stdout, err.open("w") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "genwire.cli.main", "run", str(config), "--json", "--skip-preflight"],
                stdout=stdout,
                stderr=stderr,
            )
            peak = PeakRss(proc.pid)
            _, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - started
        # The child's own peak: ru_maxrss of a forked child also counts the parent's pages
        # it held until exec (this process, with the fake server, at the fork), which once
        # made a run of 140 MB read 326 MB. /proc's VmHWM is the child's own memory alone.
        peak_mb = peak.stop() or usage.ru_maxrss / 1024
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"the run failed: {err.read_text()[-2000:]}")
        digest = hashlib.sha256((root / "out.jsonl").read_bytes()).hexdigest()[:12]
        result = json.loads(out.read_text())
    return took, peak_mb, digest, int(result.get("candidates") or rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--latency", type=float, default=0.005)
    parser.add_argument("--index-from", type=int, default=0, help="keep-novel's index_from (0: its default)")
    # The benchmark's texts share 2 of their 3 shingles ("answer to: question about <n>"): the
    # LSH proposes most kept rows for each candidate, keep-near-unique's worst case.
    parser.add_argument("--gates", nargs="+", choices=CHOICES, default=list(GATES))
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 8])
    # n is drawn from 0 .. values x rows: 1.25 makes the gates reject many (late in the run,
    # most candidates repeat an n); 10 makes a run of about 1.05 x rows candidates.
    parser.add_argument("--values", type=float, default=1.25)
    parser.add_argument("--no-plain", action="store_true", help="skip the plain baseline (long at 1M rows)")
    args = parser.parse_args()
    head = f"{'rows':>9} {'case':18} {'candidates':>11} {'time s':>8} {'cand./s':>8} {'vs plain':>9}"
    print(f"{head} {'peak RSS MB':>12} output")
    with FakeOpenAIServer(latency=args.latency) as server:
        for rows in args.rows:
            plain_s = float("nan")
            if not args.no_plain:
                server.reset_stats()  # the server keeps every request's body: not a million of them
                plain_s, plain_mb, _, _ = run(server.url, rows, 64, args.index_from, gated=False, values=args.values)
                plain = f"{rows:>9,} {'plain (baseline)':18} {rows:>11,} {plain_s:>8.1f} {rows / plain_s:>8.0f}"
                print(f"{plain} {'':>9} {plain_mb:>12.0f}", flush=True)
            digests = set()
            for concurrency in args.concurrency:
                server.reset_stats()
                took, mb, digest, candidates = run(
                    server.url,
                    rows,
                    concurrency,
                    args.index_from,
                    gated=True,
                    gates=tuple(args.gates),
                    values=args.values,
                )
                digests.add(digest)
                case = f"{'+'.join(args.gates)}, conc. {concurrency}"
                rate = candidates / took  # the gated run makes more candidates than it keeps
                print(
                    f"{rows:>9,} {case:18} {candidates:>11,} {took:>8.1f} {rate:>8.0f} "
                    f"{rate / (rows / plain_s):>8.0%} {mb:>12.0f} {digest}",
                    flush=True,
                )
            print(f"{'':>9} kept rows identical at concurrency {args.concurrency}: {len(digests) == 1}")


if __name__ == "__main__":
    main()
