"""Batch mode's promise under fire: kill -9 or Ctrl-C at random moments across three
sessions of ``genwire run --batch``, the response cache on and off; the third session
runs to the end. Counted at the fake server: every request id must be answered (paid)
exactly once, and the output must be whole.

A trial's two interrupted sessions are each stopped after a random number of journal
lines (0-5) plus a random pause, with SIGKILL or SIGINT at random (a session that wrote
the output before its signal ends the trial: a rerun of a finished run is a new run that
asks everything again); the fake's batches take a random 0.05-0.5 s. Each line prints
the trial's outcome; the summary compares the trials with the cache on (the happy path:
answers survive in the cache) against those with it off (only the journal knows what was
paid).

    python benchmarks/batch_fuzz.py [--trials 30] [--seed 1] [--rows 16] [--cli-path DIR]

``--cli-path DIR`` runs the ``genwire`` processes from another checkout (e.g. an older
commit's ``git archive``) against this checkout's fake server: the same trials, before.

tests/test_batch_hardening.py runs a few trials of the same ``trial`` on every test run.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from genwire.testing import FakeOpenAIServer

JOURNAL = "batch-journal.jsonl"


def pipeline(url: str, root: Path, rows: int) -> dict[str, Any]:
    """Two chat columns, the second reading the first: two rounds of batches."""
    return {
        "providers": {
            "srv": {
                "kind": "openai",
                "base_url": url,
                "api_key": "sk-fuzz-0123456789abcdef",
                "max_concurrency": 8,
                "backoff_s": 0.01,
                "retries": 1,
                "batch": {"poll_interval_s": 0.05},
            }
        },
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "defaults": {"chat_model": "writer"},
        "cache": {"dir": str(root / "cache")},
        "pipeline": {
            "num_records": rows,
            "seed": 5,
            "batch_size": 4,
            "max_failure_rate": 1.0,
            "output": str(root / "out.jsonl"),
            "columns": [
                {"name": "topic", "generator": "sampler", "params": {"kind": "category", "values": ["a", "b", "c"]}},
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {"name": "first", "generator": "llm-text", "params": {"prompt": "Write about {{ topic }} {{ uid }}"}},
                {"name": "second", "generator": "llm-text", "params": {"prompt": "Summarise {{ first }}"}},
            ],
        },
    }


def _command(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "genwire.cli.main", *map(str, args)]


def _journal_lines(directory: Path) -> int:
    try:
        return (directory / JOURNAL).read_bytes().count(b"\n")
    except OSError:
        return 0


@dataclass
class Outcome:
    cache: bool
    stops: list[str]  # how each interrupted session ended: "SIGKILL@3" (after 3 journal lines)
    exit_code: int
    rows: int
    batches: int
    lines: int
    answered_ids: int
    paid_twice: int  # request ids answered more than once
    seconds: float
    requests: int  # the run's request ids: two per row

    @property
    def ok(self) -> bool:
        """Whole output, and every request id answered (paid) exactly once."""
        whole = self.exit_code == 0 and self.rows == self.requests // 2
        return whole and self.paid_twice == 0 and self.answered_ids == self.lines == self.requests


def trial(
    server: FakeOpenAIServer,
    root: Path,
    rng: random.Random,
    *,
    cache: bool,
    rows: int = 16,
    cli_path: Path | None = None,
) -> Outcome:
    """One trial in ``root`` (an empty directory) against ``server`` (its counters reset)."""
    env = dict(os.environ)
    if cli_path is not None:
        env["PYTHONPATH"] = str(cli_path)
    started = time.perf_counter()
    server.reset_stats()
    server.batches.clear()
    server.batches.delay_s = rng.uniform(0.05, 0.5)
    config = root / "genwire.yaml"
    config.write_text(yaml.safe_dump(pipeline(server.url, root, rows)), encoding="utf-8")
    directory = root / "out.jsonl.checkpoint"
    extra = [] if cache else ["--no-response-cache"]
    stops = []
    final: subprocess.CompletedProcess[str] | None = None
    for _ in range(2):
        proc = subprocess.Popen(
            _command("run", config, "--batch", "--json", *extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=root,
            env=env,
        )
        after = rng.randint(0, 5)  # 6 lines: the run is over (two rounds)
        deadline = time.monotonic() + 60
        while _journal_lines(directory) < after and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.3))
        how = rng.choice([signal.SIGKILL, signal.SIGINT])
        if proc.poll() is None:
            proc.send_signal(how)
        out, err = proc.communicate(timeout=120)
        if (root / "out.jsonl").exists():  # it finished (the signal came late, or in its exit):
            stops.append("finished")  # a rerun would be a new run, asking everything again
            final = subprocess.CompletedProcess(proc.args, 0, out, err)
            break
        stops.append(f"{how.name}@{after}")
    if final is None:
        final = subprocess.run(
            _command("run", config, "--batch", "--json", *extra),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=root,
            env=env,
        )
    output = root / "out.jsonl"
    written = output.read_bytes().count(b"\n") if output.exists() else 0
    answered = dict(server.batches.answered)
    return Outcome(
        cache=cache,
        stops=stops,
        exit_code=final.returncode,
        rows=written,
        batches=server.batches.created,
        lines=sum(answered.values()),
        answered_ids=len(answered),
        paid_twice=sum(1 for n in answered.values() if n > 1),
        seconds=time.perf_counter() - started,
        requests=2 * rows,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--cli-path", type=Path, help="run the genwire processes from this checkout")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    outcomes: list[Outcome] = []
    with FakeOpenAIServer() as server, tempfile.TemporaryDirectory() as tmp:
        for number in range(args.trials):
            root = Path(tmp) / f"trial-{number}"
            root.mkdir()
            outcome = trial(server, root, rng, cache=number % 2 == 0, rows=args.rows, cli_path=args.cli_path)
            outcomes.append(outcome)
            print(
                f"trial {number:3d} cache {'on ' if outcome.cache else 'off'} stops {','.join(outcome.stops):22s} "
                f"exit {outcome.exit_code} rows {outcome.rows}/{args.rows} batches {outcome.batches} "
                f"lines {outcome.lines} ids {outcome.answered_ids} paid twice {outcome.paid_twice} "
                f"{outcome.seconds:5.1f}s {'ok' if outcome.ok else 'FAILED'}",
                flush=True,
            )
    for cache in (True, False):
        some = [o for o in outcomes if o.cache == cache]
        if some:
            print(
                f"cache {'on ' if cache else 'off'}: {sum(o.ok for o in some)}/{len(some)} trials ok, "
                f"{sum(o.paid_twice for o in some)} request ids paid twice, "
                f"mean {sum(o.lines for o in some) / len(some):.1f} lines for {2 * args.rows} requests, "
                f"mean {sum(o.seconds for o in some) / len(some):.1f}s a trial"
            )
    bad = [o for o in outcomes if not o.ok]
    print(f"{len(outcomes) - len(bad)}/{len(outcomes)} trials: every request id answered once, the output whole")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
