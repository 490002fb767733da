"""At the client's limit (issue 44): genwire's request rate beside a raw aiohttp client's on
the same server, in the same run.

The fake server runs in its own process (it does not share the GIL with the client) and
answers each request after ``--latency`` seconds. Each measurement runs in a fresh child
process, so its peak RSS is its own. Per row count (``--rows``, 20,000 and 100,000 by
default) and per case:

* **raw client**: aiohttp, ``--concurrency`` workers, each row two dependent requests (the
  second prompt holds the first answer), as genwire's pipeline makes them: the baseline;
* **genwire, cache off / on**: a uuid column and two llm-text columns (the second reads the
  first) at ``max_concurrency`` ``--concurrency``, first run (an empty cache): requests/s
  against the raw client's (targets: >= 90 % off, >= 85 % on);
* **cached rerun**: the same pipeline again, every answer from the cache, against the same
  pipeline with two template columns in place of the model columns (target >= 80 %);
* **memory**: each genwire child's peak RSS, at every row count (target: flat, within 10 %).

Cases: ``happy`` (every answer first time) and ``imperfect`` (2 % of answers a 503 that
is retried, and the second column's model ``--slow``-times slower). The raw client retries
a 503 at once; every rate counts answered requests (2 a row) per wall second of the run.

    python benchmarks/run_throughput.py [--rows 20000 100000] [--latency 0.005]
                                        [--concurrency 64] [--cases happy imperfect]
                                        [--profile PATH] [--profile-rows 8000]
                                        [--profile-run off on rerun]

``--profile PATH`` also runs genwire on ``--profile-rows`` rows (happy case) under cProfile
and writes its top functions by own time to PATH: the cache-off run, and with
``--profile-run off on rerun`` the first run with the cache on (to PATH-on) and the cached
rerun (to PATH-rerun).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib.util
import io
import json
import multiprocessing
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CASES = ("happy", "imperfect")
STRAY_ERRORS = 0.02  # the imperfect case's share of 503 answers


# --- the server ---------------------------------------------------------------------------


def _serve(latency: float, case: str, slow: float, urls: Any, stop: Any) -> None:
    from genwire.testing import FakeOpenAIServer

    with FakeOpenAIServer(latency=latency) as server:
        if case == "imperfect":
            for model in ("writer", "editor"):
                server.fail_rate(model, STRAY_ERRORS, (503,), seed=7)
            server.set_latency("editor", latency * slow)
        urls.put(server.url)
        stop.wait()


class Server:
    """The fake server of one case, in its own process."""

    def __init__(self, latency: float, case: str, slow: float) -> None:
        context = multiprocessing.get_context("spawn")
        urls = context.Queue()
        self._stop = context.Event()
        self._process = context.Process(target=_serve, args=(latency, case, slow, urls, self._stop), daemon=True)
        self._process.start()
        self.url: str = urls.get(timeout=60)

    def close(self) -> None:
        self._stop.set()
        self._process.join(timeout=10)


# --- the measurements (each in a child process) ---------------------------------------


def pipeline(url: str, rows: int, concurrency: int, out: Path, *, models: bool, cache: bool) -> dict[str, Any]:
    """uuid + 2 columns, the second reading the first: llm-text (``models``) or template."""

    def column(name: str, alias: str, prompt: str) -> dict[str, Any]:
        if models:
            return {"name": name, "generator": "llm-text", "resources": {"model": alias}, "params": {"prompt": prompt}}
        return {"name": name, "generator": "template", "params": {"template": prompt}}

    return {
        # retries 10: the raw client retries a 503 until it is answered; with the default 3, one
        # request in ~6 million meets four 503s in a row (2 %**4) and fails its row. backoff_s 0:
        # the raw client retries at once too; with the default 0.5 s, 2 % of 7,000 requests/s
        # each hold a slot of 64 for half a second, and the comparison measures the backoff
        # (the imperfect case idle: 75 % of the raw rate at 115 % of its CPU efficiency).
        "providers": {
            "srv": {"kind": "openai", "base_url": url, "max_concurrency": concurrency, "retries": 10, "backoff_s": 0}
        },
        "models": {
            "writer": {"provider": "srv", "model": "writer", "kind": "chat"},
            "editor": {"provider": "srv", "model": "editor", "kind": "chat"},
        },
        "cache": {"enabled": cache, "dir": str(out.parent / "cache")},
        "pipeline": {
            "num_records": rows,
            "output": str(out),
            "columns": [
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                column("first", "writer", "Write about {{ uid }}"),
                column("second", "editor", "Summarise {{ first }}"),
            ],
        },
    }


async def raw_client(url: str, rows: int, concurrency: int) -> tuple[float, float]:
    """Wall and CPU seconds a plain aiohttp client takes for the pipeline's requests."""
    import uuid

    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

        async def ask(model: str, prompt: str) -> str:
            body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}]}).encode()
            while True:
                async with session.post(url + "/chat/completions", data=body) as resp:
                    raw = await resp.read()
                    if resp.status == 200:
                        text: str = json.loads(raw)["choices"][0]["message"]["content"]
                        return text

        todo = iter(range(rows))

        async def worker() -> None:
            for _ in todo:
                first = await ask("writer", f"Write about {uuid.uuid4()}")
                await ask("editor", f"Summarise {first}")

        started, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.perf_counter() - started, time.process_time() - cpu


async def genwire_run(spec: dict[str, Any], profiler: cProfile.Profile | None = None) -> tuple[float, float]:
    """Wall and CPU seconds ``container.run()`` takes (pre-flight skipped; the output written)."""
    import genwire

    out = Path(spec["dir"]) / "out.jsonl"
    config = pipeline(spec["url"], spec["rows"], spec["concurrency"], out, models=spec["models"], cache=spec["cache"])
    async with genwire.boot(config) as container:
        if profiler is not None:
            profiler.enable()
        started, cpu = time.perf_counter(), time.process_time()
        result = await container.run(skip_preflight=True, resume=False)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        if profiler is not None:
            profiler.disable()
    if result.rows_written != spec["rows"]:
        errors = Path(result.errors_file).read_text()[:2000] if result.errors_file else ""
        raise AssertionError(f"{result}\nthe errors file begins:\n{errors}")
    if spec["models"] and spec.get("expect_cached"):
        cached = sum(u.cached for u in result.usage.values())
        assert cached == 2 * spec["rows"], f"only {cached} answers from the cache"
    return seconds, cpu


def child(spec: dict[str, Any]) -> None:
    profiler = cProfile.Profile() if spec.get("profile") else None
    factory = None
    if spec.get("loop") == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        if spec["what"] == "raw":
            seconds, cpu = runner.run(raw_client(spec["url"], spec["rows"], spec["concurrency"]))
        else:
            seconds, cpu = runner.run(genwire_run(spec, profiler))
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(spec.get("top", 25))
        Path(spec["profile"]).write_text(text.getvalue())
        profiler.dump_stats(spec["profile"] + ".prof")  # for pstats / snakeviz
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "cpu": cpu, "rss_mb": rss_mb}))


def measure(**spec: Any) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS MiB) of one measurement, in a fresh process."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"measurement {spec['what']} failed:\n{done.stderr}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return answer["seconds"], answer["cpu"], answer["rss_mb"]


# --- the comparison -------------------------------------------------------------------------


def run_case(case: str, rows_list: list[int], args: argparse.Namespace) -> list[dict[str, Any]]:
    server = Server(args.latency, case, args.slow)
    results = []
    try:
        for rows in rows_list:
            with tempfile.TemporaryDirectory() as tmp:
                common = {"url": server.url, "rows": rows, "concurrency": args.concurrency, "dir": tmp}
                raw1, raw_cpu1, _ = measure(what="raw", **common)
                gw = {**common, "loop": args.loop}
                off, off_cpu, rss_off = measure(what="genwire", models=True, cache=False, **gw)
                on, on_cpu, rss_on = measure(what="genwire", models=True, cache=True, **gw)
                raw2, raw_cpu2, _ = measure(what="raw", **common)
                template, template_cpu, _ = measure(what="genwire", models=False, cache=False, **gw)
                rerun, rerun_cpu, rss_rerun = measure(what="genwire", models=True, cache=True, expect_cached=True, **gw)
                raw_uv = measure(what="raw", loop="uvloop", **common)[0] if args.loop == "uvloop" else None
            raw = (raw1 + raw2) / 2  # before and after the genwire runs: drift shows in both
            raw_cpu = (raw_cpu1 + raw_cpu2) / 2
            requests = 2 * rows
            results.append(
                {
                    "case": case,
                    "rows": rows,
                    "raw": requests / raw,
                    "raw_uvloop": requests / raw_uv if raw_uv else None,
                    "raw_spread": abs(raw1 - raw2) / raw,
                    # the client process's CPU per answered request, in microseconds
                    "cpu": tuple(1e6 * c / requests for c in (raw_cpu, off_cpu, on_cpu)),
                    "off": requests / off,
                    "on": requests / on,
                    "template": rows / template,
                    "rerun": rows / rerun,
                    # the client process's CPU per row, template columns and cached rerun, microseconds
                    "row_cpu": (1e6 * template_cpu / rows, 1e6 * rerun_cpu / rows),
                    "rss": (rss_off, rss_on, rss_rerun),
                }
            )
    finally:
        server.close()
    return results


def report(results: list[dict[str, Any]], args: argparse.Namespace, load: str) -> None:
    print(
        f"uuid + 2 llm-text columns, fake server (own process) at {args.latency * 1000:g} ms "
        f"per answer, max_concurrency {args.concurrency}; load average at start: {load}"
    )
    print(f"genwire on the {args.loop} event loop (as `genwire run`), the raw client on asyncio's")
    print("requests/s (2 a row) of genwire's first run beside a raw aiohttp client's, same server, same run")
    header = (
        f"{'case':<10}{'rows':>8}{'raw req/s':>11}{'off req/s':>11}{'off %':>7}{'on req/s':>10}{'on %':>7}"
        f"{'tmpl rows/s':>13}{'rerun rows/s':>14}{'rerun %':>9}{'RSS MiB off/on/rerun':>22}"
    )
    print(header)
    for r in results:
        rss = "/".join(f"{m:.0f}" for m in r["rss"])
        print(
            f"{r['case']:<10}{r['rows']:>8,}{r['raw']:>11,.0f}{r['off']:>11,.0f}{r['off'] / r['raw']:>7.0%}"
            f"{r['on']:>10,.0f}{r['on'] / r['raw']:>7.0%}{r['template']:>13,.0f}{r['rerun']:>14,.0f}"
            f"{r['rerun'] / r['template']:>9.0%}{rss:>22}"
        )
    print("targets: off >= 90 %, on >= 85 % of the raw client; cached rerun >= 80 % of template columns")
    for r in results:
        if r["raw_uvloop"]:
            print(
                f"{r['case']} {r['rows']:,}: the raw client on uvloop too: {r['raw_uvloop']:,.0f} req/s; "
                f"genwire off {r['off'] / r['raw_uvloop']:.0%}, on {r['on'] / r['raw_uvloop']:.0%} of that"
            )
    print()
    print("the client process's CPU per answered request (the run's limit on a fast endpoint), microseconds")
    print(f"{'case':<10}{'rows':>8}{'raw':>8}{'off':>8}{'on':>8}{'raw/off':>9}{'raw/on':>8}")
    for r in results:
        raw_us, off_us, on_us = r["cpu"]
        print(
            f"{r['case']:<10}{r['rows']:>8,}{raw_us:>8.0f}{off_us:>8.0f}{on_us:>8.0f}"
            f"{raw_us / off_us:>9.0%}{raw_us / on_us:>8.0%}"
        )
    print()
    print("the client process's CPU per row: template columns vs the cached rerun, microseconds")
    print(f"{'case':<10}{'rows':>8}{'tmpl':>8}{'rerun':>8}{'tmpl/rerun':>12}")
    for r in results:
        tmpl_us, rerun_us = r["row_cpu"]
        print(f"{r['case']:<10}{r['rows']:>8,}{tmpl_us:>8.0f}{rerun_us:>8.0f}{tmpl_us / rerun_us:>12.0%}")
    spread = max(r["raw_spread"] for r in results)
    print(f"raw client before vs after the genwire runs differed by up to {spread:.0%} (the machine's drift)")
    for case in {r["case"] for r in results}:
        rows = [r for r in results if r["case"] == case]
        if len(rows) > 1:
            small, big = rows[0], rows[-1]
            growth = max(b / s - 1 for s, b in zip(small["rss"], big["rss"], strict=True))
            print(
                f"{case}: peak RSS at {big['rows']:,} rows vs {small['rows']:,}: +{growth:.0%} at most (target <= 10 %)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--latency", type=float, default=0.005, help="seconds per answer")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--slow", type=float, default=4.0, help="the imperfect case's slow model: times the latency")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--profile", type=Path, help="cProfile one cache-off run; its top functions to this file")
    parser.add_argument("--profile-rows", type=int, default=8000)
    parser.add_argument("--profile-top", type=int, default=25)
    parser.add_argument(
        "--profile-run",
        nargs="+",
        choices=("off", "on", "rerun"),
        default=["off"],
        help="which runs --profile profiles: cache off, a first run cache on, the cached rerun",
    )
    parser.add_argument(
        "--loop", choices=("auto", "asyncio", "uvloop"), default="auto", help="genwire's; auto: as `genwire run`"
    )
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.loop == "auto":
        args.loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    results = []
    for case in args.cases:
        results += run_case(case, args.rows, args)
    report(results, args, load)
    if args.profile is not None:
        profile_runs(args)


def profile_runs(args: argparse.Namespace) -> None:
    """``--profile PATH``: one genwire run of ``--profile-rows`` rows (happy case) under
    cProfile per ``--profile-run``: ``off`` (cache off), ``on`` (a first run, cache on)
    and ``rerun`` (the same again, every answer from the cache). Each one's top functions
    by own time go to PATH, or PATH with ``-on`` / ``-rerun`` before its suffix."""
    server = Server(args.latency, "happy", args.slow)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            common = {"url": server.url, "rows": args.profile_rows, "concurrency": args.concurrency, "dir": tmp}
            for run in args.profile_run:
                path = args.profile if run == "off" else args.profile.with_stem(f"{args.profile.stem}-{run}")
                if run == "rerun" and "on" not in args.profile_run:  # the cache the rerun reads
                    measure(what="genwire", models=True, cache=True, loop=args.loop, **common)
                seconds, cpu, _ = measure(
                    what="genwire",
                    models=True,
                    cache=run != "off",
                    expect_cached=run == "rerun",
                    loop=args.loop,
                    profile=str(path.resolve()),
                    top=args.profile_top,
                    **common,
                )
                took = f"{seconds:.1f} s, {cpu:.1f} s CPU under cProfile"
                print(f"profile of {args.profile_rows:,} rows, {run} ({took}): {path}")
    finally:
        server.close()


if __name__ == "__main__":
    main()
