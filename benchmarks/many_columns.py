"""Wide rows: `genwire run CONFIG -n 2` of generated configs of N `template` columns (each
reads the column before it), for N = 1,000 / 2,000 / 4,000 / 10,000, in a real process.
Beside each time: the time per column once start-up is taken off (the same command on a
1-column config, measured in this run), and that divided by the smallest size's (the
baseline: 1.0x everywhere means linear; 10,000 columns used to take 104 s, ~30x the
1,000-column rate, because every column deep-copied every row).

Two cases: the happy path (every value a string) and the imperfect one: a first column
holding a mapping (copied for each column that may change it) and a column whose
template fails for half the rows (stray errors: the run goes on with the others, -n 4).

    python benchmarks/many_columns.py [--sizes 1000,2000,4000,10000] [--runs 1] [--cases happy,imperfect] [--cpu]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def _config(out: Path, n: int, first: str, template: Callable[[int], str], extra: str = "") -> str:
    """``n`` columns: ``first``, then a template column ``c{i}`` rendering ``template(i)``."""
    lines = ["pipeline:", f"  output: {out}", *([extra] if extra else []), "  columns:", f"    - {first}"]
    lines += [f'    - {{name: c{i}, generator: template, params: {{template: "{template(i)}"}}}}' for i in range(1, n)]
    return "\n".join(lines) + "\n"


def happy_config(n: int, out: Path) -> str:
    first = '{name: c0, generator: template, params: {template: "x"}}'
    return _config(out, n, first, lambda i: f"{i}:{{{{ c{i - 1} | length }}}}")


def imperfect_config(n: int, out: Path) -> str:
    first = "{name: c0, generator: sampler, params: {kind: category, values: [{name: a, extra: 1}, {name: b}]}}"

    def template(i: int) -> str:
        read = "c0.extra" if i == n // 2 else "c0.name"  # rows drawing {name: b} fail here
        return f"{i}:{{{{ {read} }}}}{{{{ c{i - 1} | length }}}}"

    return _config(out, n, first, template, extra="  max_failure_rate: 1.0")


def wall(config: Path, rows: int, runs: int) -> float:
    """Median seconds of the command: CPU seconds (user + system) with ``--cpu``, which a
    machine shared with other work disturbs far less than wall time."""
    times = []
    for _ in range(runs):
        cmd = [sys.executable, "-m", "genwire.cli.main", "run", str(config), "-n", str(rows), "--fresh", "--json"]
        started, cpu = time.perf_counter(), _child_cpu()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        times.append(_child_cpu() - cpu if CPU_TIME else time.perf_counter() - started)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return statistics.median(times)


CPU_TIME = False


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(tmp: str, make: Callable[[int, Path], str], n: int, rows: int, runs: int) -> float:
    path = Path(tmp) / f"{make.__name__}-{n}.yaml"
    path.write_text(make(n, Path(tmp) / f"out-{n}.jsonl"), encoding="utf-8")
    return wall(path, rows, runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,2000,4000,10000")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--cases", default="happy,imperfect", help="happy, imperfect or both (comma-separated)")
    parser.add_argument("--cpu", action="store_true", help="CPU seconds instead of wall seconds")
    args = parser.parse_args()
    global CPU_TIME
    CPU_TIME = args.cpu
    print(f"{'CPU' if CPU_TIME else 'wall'} seconds, median of {args.runs}")
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        cases = {
            "happy": ("happy path", happy_config, 2),
            "imperfect": ("mapping column + stray errors", imperfect_config, 4),
        }
        for case, make, rows in (cases[name] for name in args.cases.split(",")):
            print(f"{case}: genwire run -n {rows}")
            floor = measure(tmp, make, 2, rows, args.runs)
            print(f"start-up (2 columns): {floor:.2f} s")
            print(f"{'columns':>8} {'seconds':>9} {'ms/column':>10} {'vs smallest':>12}")
            base: float | None = None
            for n in sizes:
                seconds = measure(tmp, make, n, rows, args.runs)
                per_column = max(seconds - floor, 0.0) / n
                base = base or per_column
                ratio = f"{per_column / base:.1f}x" if base else "–"
                print(f"{n:>8,} {seconds:>9.2f} {per_column * 1000:>10.2f} {ratio:>12}")


if __name__ == "__main__":
    main()
