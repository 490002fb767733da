"""The report page's size and the time to write it at 10k, 100k and 1M rows (SPEC §19:
"a few MB at 1,000,000 rows").

Each case is a checkpoint folder as a run leaves it: rows files (two sessions), 5 % of
the rows failed across 6 classes, and a metrics file of one tick a second for a run at
1,000 rows/s (two models, stray 429s). Two ways to write the page are timed: at the end
of a run (the live checkpoint says which rows are kept: only the failures are read) and
``genwire report OUTPUT`` (the rows files are read to know that). The imperfect case:
rows of 4 kB and 60 failure classes at 100k rows.

    python benchmarks/report_size.py [--sizes 10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from genwire.engine.records.metrics import METRICS_FILE
from genwire.engine.report import write_report


def make_checkpoint(output: Path, rows: int, *, cell_chars: int = 80, classes: int = 6) -> set[int]:
    """A checkpoint of ``rows`` rows; returns the failed rows' indices."""
    directory = output.with_name(output.name + ".checkpoint")
    directory.mkdir()
    rng = random.Random(1)
    failed = {i for i in range(rows) if rng.random() < 0.05}
    half = rows // 2
    text = "y" * cell_chars
    for session, (start, stop) in enumerate(((0, half), (half, rows)), 1):
        with (directory / f"rows-{session:04d}.jsonl").open("w", encoding="utf-8") as handle:
            for i in range(start, stop):
                if i not in failed:
                    row = {"uid": f"{i:08x}", "question": f"{text} {i}", "answer": f"answer {i} {text}"}
                    handle.write(json.dumps({"i": i, "row": row}, ensure_ascii=False) + "\n")
    with (directory / "failed-0002.jsonl").open("w", encoding="utf-8") as handle:
        for i in sorted(failed):
            record = {
                "row": i,
                "column": "answer",
                "error_class": f"class_{i % classes}",
                "error": f"HTTP 400 from POST http://127.0.0.1/v1/chat/completions: {text}",
                "data": {"uid": f"{i:08x}", "question": text},
            }
            handle.write(json.dumps(record) + "\n")
    seconds = max(1, rows // 1000)
    with (directory / METRICS_FILE).open("w", encoding="utf-8") as handle:
        for session, (start, stop) in enumerate(((0, seconds // 2), (seconds // 2, seconds)), 1):
            handle.write(
                json.dumps({"kind": "session", "session": session, "t": 1e9 + start * 2, "num_records": rows}) + "\n"
            )
            for second in range(start, stop):
                models = {
                    alias: {
                        "requests": 1000,
                        "sent": 1000,
                        "answered": 1000,
                        "prompt_tokens": 30000,
                        "completion_tokens": 60000,
                        "rate_limited": int(rng.random() < 0.05) * 20,
                        "retries": 3,
                        "latency": {str(b): 100 for b in range(15, 25)},
                        "errors": {"rate_limited": 3},
                        "peak_in_flight": 32,
                        "in_flight": 30,
                    }
                    for alias in ("writer", "judge")
                }
                tick = {
                    "kind": "tick",
                    "session": session,
                    "t": 1e9 + second * 2 + 1,
                    "dt": 1.0,
                    "rows": {"written": 950, "failed": 50},
                    "models": models,
                }
                handle.write(json.dumps(tick, separators=(",", ":")) + "\n")
            handle.write(
                json.dumps({"kind": "end", "session": session, "t": 1e9 + stop * 2, "outcome": "interrupted"}) + "\n"
            )
    return failed


def measure(rows: int, **kind: int) -> tuple[int, float, float]:
    with tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "out.jsonl"
        failed = make_checkpoint(output, rows, **kind)
        started = time.perf_counter()
        page = write_report(output, done=lambda i: i not in failed)  # at the end of a run
        at_end = time.perf_counter() - started
        started = time.perf_counter()
        write_report(output)  # genwire report OUTPUT
        command = time.perf_counter() - started
        return page.stat().st_size, at_end, command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    args = parser.parse_args()
    print(f"{'case':<44}{'page size':>12}{'at run end':>12}{'genwire report':>16}")
    for rows in (int(n) for n in args.sizes.split(",")):
        size, at_end, command = measure(rows)
        print(f"{f'{rows:,} rows, 5 % failed':<44}{size / 1e3:>10,.0f} kB{at_end:>10.2f} s{command:>14.2f} s")
    size, at_end, command = measure(100_000, cell_chars=2_000, classes=60)
    print(f"{'100,000 rows, 4 kB rows, 60 classes':<44}{size / 1e3:>10,.0f} kB{at_end:>10.2f} s{command:>14.2f} s")


if __name__ == "__main__":
    main()
