"""The dataset card of a 1,000,000-row output (SPEC §24: "in under 10 s and 20 MB of
memory over the process's own"): time and peak memory of ``render_card`` against the
baseline of loading the rows (``json.loads`` of every line into a list), each measured
in a fresh process, in the same run: peak RSS over the process's own once its libraries
are loaded (numpy, pyarrow: their import's RSS is printed apart, as "libs").

Two outputs: the happy path (4 short columns, few distinct values: the exact counter) and
an imperfect one (a long unique text per row, a nested verdict, 30 % nulls: every column
past the exact counter's cap, so the HyperLogLog sketch counts).

    python benchmarks/card_memory.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from genwire.engine.report.about import RunAbout
from genwire.engine.report.data import ReportData
from genwire.engine.report.record import record_path, write_record

MEASURE = """
import json, resource, sys, time
from pathlib import Path
mode, output = sys.argv[1], Path(sys.argv[2])
from genwire.engine.handoff.card import render_card
from genwire.engine.handoff.finished import finished_run
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
import numpy, yaml, pyarrow, pyarrow.json, pyarrow.compute  # the card's libraries: loaded before the baseline
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
if mode == "card":
    text = render_card(finished_run(output))
    size = len(text)
else:
    rows = [json.loads(line) for line in output.open("rb")]
    size = len(rows)
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "mb": (peak - base) / 1024, "libs_mb": (base - before) / 1024, "size": size}))
"""


def write_output(path: Path, rows: int, *, imperfect: bool) -> list[str]:
    rng = random.Random(7)
    topics = ["tides", "rainbows", "volcanoes", "magnets", "thunder", "seasons"]
    with path.open("w", encoding="utf-8") as handle:
        for i in range(rows):
            if imperfect:
                row = {
                    "uid": f"{i:012x}",
                    "answer": None if rng.random() < 0.3 else f"answer {i}: " + "x" * rng.randint(100, 600),
                    "verdict": {"score": rng.randint(1, 5), "reason": f"reason {i}"},
                }
            else:
                row = {
                    "topic": rng.choice(topics),
                    "angle": rng.choice(["a toy", "a story"]),
                    "score": rng.randint(1, 5),
                }
                row["ok"] = row["score"] >= 4
            handle.write(json.dumps(row) + "\n")
    return list(row)


def finish(output: Path, columns: list[str], rows: int) -> None:
    """A run record as a finished run leaves it beside its output."""
    data = ReportData(output=str(output), outcome="completed", rows_written=rows, columns=columns, sessions=1)
    data.about = RunAbout(seed=7, fingerprint="0123456789abcdef", pipeline={"path": "genwire.yaml", "text": "x: 1\n"})
    write_record(output, data, "bench")
    assert record_path(output).is_file()


def measure(mode: str, output: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, mode, str(output)], capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    head = f"{'case':<10} {'rows':>10} {'file MB':>8} | {'load rows s':>11} {'MB':>7} | {'card s':>7} {'MB':>6}"
    print(head + f" {'libs MB':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for case in ("happy", "imperfect"):
            output = Path(tmp) / f"{case}.jsonl"
            columns = write_output(output, args.rows, imperfect=case == "imperfect")
            finish(output, columns, args.rows)
            baseline, card = measure("load", output), measure("card", output)
            size = output.stat().st_size / 1e6
            print(
                f"{case:<10} {args.rows:>10,} {size:>8.0f} | {baseline['seconds']:>11.2f} {baseline['mb']:>7.1f} | "
                f"{card['seconds']:>7.2f} {card['mb']:>6.1f} {card['libs_mb']:>8.1f}"
            )


if __name__ == "__main__":
    main()
