"""Endpoint pools (SPEC §17): one model alias on several replicas, measured in one run.

Every replica is a fake OpenAI server in its own process (50 ms per request,
``max_concurrency: 16`` each); N llm-text rows (default 3,000). Cases:

1. **One replica** (the baseline) against **three replicas** in a pool: rows/s and the ratio
   (done means: >= 2.7x).
2. **A replica dies** (SIGKILL) once a third of the rows are written: failed rows (done
   means: 0), the rows/s per second of the run, and how long after the death the rate was
   back to >= 60 % of its rate before (done means: within 30 s).
3. **A replica hangs** (SIGSTOP: the kernel still accepts its connections, nothing answers)
   at a third of the run, ``timeout_s: 2``: failed rows, and the longest any row's call
   waited against ``timeout_s`` + one request.
4. **The primary is dead from the start**, a fallback alive: the pre-flight's verdict and
   the rows/s on the fallback (against the one-replica baseline); the dead primary starts
   cooled down, so it gets no first wave of requests.
5. **A replica flaps** (half its answers are 503s, at random) in a pool of two: the share of
   the requests it still gets and the rows/s, against a pool of two healthy replicas.

    python benchmarks/endpoint_pools.py [--rows 3000] [--only speed|death|hang|fallback|flap]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import genwire
from genwire.generators import Generator, GeneratorMetadata, ResourceKind

LATENCY_S = 0.05
CONCURRENCY = 16
WAITS: list[float] = []  # every row's call, in seconds (the timed-text generator's)
CLEAN_WAIT: list[float] = []  # the longest call of the healthy pool run (queueing for a slot included)


class TimedParams(BaseModel):
    prompt: str


class TimedText(Generator[TimedParams]):
    """llm-text's request, one per row, each call's wait recorded (for the hang case)."""

    metadata = GeneratorMetadata(
        name="timed-text", description="times each call", required_resources={"model": ResourceKind.CHAT_MODEL}
    )
    params_model = TimedParams

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        async def one() -> str:
            started = time.perf_counter()
            try:
                answer: str = await self.resources.model.complete(self.params.prompt)
                return answer
            finally:
                WAITS.append(time.perf_counter() - started)

        return list(await asyncio.gather(*(one() for _ in rows)))


@contextlib.contextmanager
def replicas(n: int, *flags: list[str]) -> Iterator[list[tuple[str, subprocess.Popen[str]]]]:
    """``n`` servers; ``flags[i]``: more options of server i."""
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "genwire.testing.serve",
                "--latency",
                str(LATENCY_S),
                *(flags[i] if i < len(flags) else []),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    try:
        urls = [p.stdout.readline().strip() for p in procs if p.stdout is not None]
        yield list(zip(urls, procs, strict=True))
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)  # a stopped process ignores SIGTERM until continued
            proc.terminate()
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()


def config(urls: list[str], rows: int, out: Path, roles: list[str] | None = None, timeout_s: float = 60.0) -> Any:
    names = [f"r{i}" for i in range(len(urls))]
    roles = roles or ["primary"] * len(urls)
    model: dict[str, Any] = {"kind": "chat", "model": "writer"}
    if len(urls) == 1:
        model["provider"] = "r0"
    else:
        model["endpoints"] = [{"provider": n, "role": r} for n, r in zip(names, roles, strict=True)]
    return {
        "providers": {
            n: {"kind": "openai", "base_url": u, "max_concurrency": CONCURRENCY, "timeout_s": timeout_s}
            for n, u in zip(names, urls, strict=True)
        },
        "models": {"writer": model},
        "preflight": {"timeout_s": 3, "deadline_s": 10},
        "pipeline": {
            "num_records": rows,
            "batch_size": 64,
            "max_failure_rate": 1.0,
            "output": str(out),
            "columns": [
                {"name": "text", "generator": "timed-text", "resources": {"model": "writer"}, "params": {"prompt": "x"}}
            ],
        },
    }


class Timeline:
    """A progress hook: (seconds since start, rows done) at each batch; calls ``at_third``
    once a third of the rows are done."""

    def __init__(self, at_third: Callable[[], None] | None = None) -> None:
        self.points: list[tuple[float, int]] = []
        self.at_third = at_third
        self.third_at: float | None = None
        self.total = 0
        self.finished = 0
        self.started = 0.0

    def start(self, total: int, done: int = 0) -> None:
        self.total, self.started = total, time.perf_counter()

    def advance(self, done: int, failed: int, status: str = "") -> None:
        """``done``/``failed``: the rows of one more batch (increments)."""
        now = time.perf_counter() - self.started
        self.finished += done + failed
        self.points.append((now, self.finished))
        if self.third_at is None and self.finished >= self.total / 3:
            self.third_at = now
            if self.at_third is not None:
                self.at_third()

    def stop(self) -> None:
        pass

    def steady_rate(self) -> float:
        """Rows/s between 10 % and 90 % of the rows (start-up and the last stragglers out)."""
        low = next((at, done) for at, done in self.points if done >= 0.1 * self.total)
        high = next((at, done) for at, done in self.points if done >= 0.9 * self.total)
        return (high[1] - low[1]) / (high[0] - low[0]) if high[0] > low[0] else 0.0

    def per_second(self) -> list[int]:
        """Rows finished in each whole second of the run."""
        if not self.points:
            return []
        buckets = [0] * (int(self.points[-1][0]) + 1)
        last = 0
        for at, done in self.points:
            buckets[int(at)] += done - last
            last = done
        return buckets


async def run(cfg: Any, progress: Timeline | None = None, skip_preflight: bool = True) -> genwire.RunResult:
    container = genwire.boot(cfg, generators=[TimedText])
    async with container:
        return await container.run(progress=progress, skip_preflight=skip_preflight, resume=False)


def rate_line(label: str, result: genwire.RunResult) -> str:
    return (
        f"{label:<44} {result.rows_written:>6,} rows {result.rows_failed:>4} failed "
        f"{result.duration_s:>7.2f} s {result.rows_per_s:>8.1f} rows/s"
    )


def endpoint_lines(result: genwire.RunResult) -> list[str]:
    lines = []
    for name, e in result.summary()["models"]["writer"].get("endpoints", {}).items():
        p50 = f"{e['latency_p50_s'] * 1000:.0f}" if e["latency_p50_s"] is not None else "-"
        p95 = f"{e['latency_p95_s'] * 1000:.0f}" if e["latency_p95_s"] is not None else "-"
        lines.append(
            f"    {name}: {e['requests']:>6,} requests {e['failures']:>4} failures  p50 {p50} ms  p95 {p95} ms"
        )
    return lines


async def speed(rows: int, out: Path) -> float:
    print(
        f"1. one replica vs a pool of three ({rows:,} rows, {LATENCY_S * 1000:.0f} ms, max_concurrency {CONCURRENCY})"
    )
    one_line, three_line = Timeline(), Timeline()
    with replicas(1) as one:
        base = await run(config([one[0][0]], rows, out.with_name("one.jsonl")), one_line)
    WAITS.clear()
    with replicas(3) as three:
        pooled = await run(config([u for u, _ in three], rows, out), three_line)
    CLEAN_WAIT.append(max(WAITS))
    print("   " + rate_line("one replica (baseline)", base) + f"  steady {one_line.steady_rate():.0f} rows/s")
    print("   " + rate_line("pool of three replicas", pooled) + f"  steady {three_line.steady_rate():.0f} rows/s")
    print("\n".join(endpoint_lines(pooled)))
    ratio = pooled.rows_per_s / base.rows_per_s
    steady = three_line.steady_rate() / one_line.steady_rate()
    print(f"   speed-up: {ratio:.2f}x whole run, {steady:.2f}x steady (10-90 % of rows) (done means >= 2.7x)\n")
    return base.rows_per_s


async def death(rows: int, out: Path) -> None:
    print(f"2. a pool of three, one replica killed (SIGKILL) when a third of {rows:,} rows are written")
    with replicas(3) as three:
        victim = three[0][1]
        timeline = Timeline(lambda: os.kill(victim.pid, signal.SIGKILL))
        result = await run(config([u for u, _ in three], rows, out), timeline)
    print("   " + rate_line("one replica dies", result))
    print("\n".join(endpoint_lines(result)))
    per_second = timeline.per_second()
    died = timeline.third_at or 0.0
    print(f"   died at {died:.2f} s; rows per second of the run: {per_second}")
    before = [n for second, n in enumerate(per_second) if second + 1 <= died]
    pre = statistics.fmean(before) if before else rows / 3 / max(died, 1e-9)
    # Recovery: the first whole second after the death whose rate is >= 60 % of before
    # (the run's last, partial second is not counted).
    back = next(
        (s for s in range(int(died) + 1, len(per_second) - 1) if per_second[s] >= 0.6 * pre),
        None,
    )
    if back is None:
        after = rows - rows / 3
        tail = timeline.points[-1][0] - died
        verdict = f"the rest ran at {after / tail:.0f} rows/s = {after / tail / pre:.0%} of before (under a second)"
    else:
        verdict = (
            f"back to >= 60 % ({per_second[back]} of {pre:.0f} rows/s) in second {back}, {back + 1 - died:.1f} s after"
        )
    print(f"   rate before the death {pre:.0f} rows/s; {verdict} (done means: within 30 s)\n")


async def hang(rows: int, out: Path, timeout_s: float = 2.0) -> None:
    print(f"3. a pool of three, one replica hangs (SIGSTOP) at a third of {rows:,} rows, timeout_s {timeout_s:g}")
    WAITS.clear()
    with replicas(3) as three:
        stuck = three[0][1]
        timeline = Timeline(lambda: os.kill(stuck.pid, signal.SIGSTOP))
        result = await run(config([u for u, _ in three], rows, out, timeout_s=timeout_s), timeline)
    print("   " + rate_line("one replica hangs", result))
    print("\n".join(endpoint_lines(result)))
    longest = max(WAITS)
    bound = timeout_s + LATENCY_S
    clean = f"; the healthy pool's longest, queueing included: {CLEAN_WAIT[0]:.2f} s" if CLEAN_WAIT else ""
    print(
        f"   longest wait of any row's call: {longest:.2f} s (bound: timeout {timeout_s:g} s + one request "
        f"{LATENCY_S:g} s = {bound:.2f} s, plus its queueing for a slot{clean}); "
        f"calls over 1 s: {sum(w > 1 for w in WAITS)}"
    )
    print(f"   rows per second of the run: {timeline.per_second()}\n")


async def fallback(rows: int, out: Path, baseline: float | None) -> None:
    print(f"4. primary dead from the start, fallback alive ({rows:,} rows)")
    with replicas(2) as two:
        dead, _ = two[0]
        two[0][1].kill()
        two[0][1].wait()
        cfg = config([dead, two[1][0]], rows, out, roles=["primary", "fallback"])
        result = await run(cfg, skip_preflight=False)
    assert result.preflight is not None
    verdict = ", ".join(f"{c.endpoint}: {c.status}" for c in result.preflight.checks)
    print(f"   pre-flight ok={result.preflight.ok} ({verdict})")
    print("   " + rate_line("run on the fallback", result))
    print("\n".join(endpoint_lines(result)))
    if baseline:
        print(f"   {result.rows_per_s / baseline:.0%} of the one-replica baseline")
    print()


async def flap(rows: int, out: Path) -> None:
    print(f"5. a pool of two, one replica failing half its requests with 503 ({rows:,} rows)")
    with replicas(2) as two:
        healthy = await run(config([u for u, _ in two], rows, out.with_name("two.jsonl")))
    with replicas(2, ["--fail-rate", "0.5", "--fail-status", "503"]) as two:
        flapping = await run(config([u for u, _ in two], rows, out))
    print("   " + rate_line("two healthy replicas (baseline)", healthy))
    print("   " + rate_line("one of them flapping", flapping))
    print("\n".join(endpoint_lines(flapping)))
    endpoints = flapping.summary()["models"]["writer"]["endpoints"]
    share = endpoints["r0"]["requests"] / sum(e["requests"] for e in endpoints.values())
    print(
        f"   the flapping replica got {share:.1%} of the requests (it kept half of them before requests "
        f"sent before its failure stopped resetting its cooldown); {flapping.rows_per_s / healthy.rows_per_s:.0%} "
        "of the healthy pool's rows/s\n"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--only", choices=["speed", "death", "hang", "fallback", "flap"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        baseline = None
        if args.only in (None, "speed"):
            baseline = await speed(args.rows, out)
        if args.only in (None, "death"):
            await death(args.rows, Path(tmp) / "death.jsonl")
        if args.only in (None, "hang"):
            await hang(args.rows, Path(tmp) / "hang.jsonl")
        if args.only in (None, "fallback"):
            await fallback(args.rows, Path(tmp) / "fallback.jsonl", baseline)
        if args.only in (None, "flap"):
            await flap(args.rows, Path(tmp) / "flap.jsonl")


if __name__ == "__main__":
    asyncio.run(main())
