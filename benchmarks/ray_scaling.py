"""Ray engine scaling: rows/s with 1 and 2 Ray workers beside the local engine, in the
same run, against the fake server (real HTTP on 127.0.0.1).

    python benchmarks/ray_scaling.py [--latency 0.05] [--concurrency 16] [--rows 800 3200] [--cpu-ms 4]

Two pipelines: ``io`` (sampler + llm-text: bound by max_concurrency / latency, which the
Ray engine holds cluster-wide, so more workers cannot beat the cap) and ``io+cpu`` (the
same plus a plugin column burning ``--cpu-ms`` of pure-Python CPU per row: that part is
what extra worker processes parallelise). Every timing is a whole run, so the Ray rows
include starting the worker processes (Ray itself is started once, before the table): the
``1st request`` column is the time from the run's start to the server's first request,
which on Ray is mostly Ray starting a fresh worker process per actor (about a second on
a loaded 2-core machine; the actors of the first Ray run take the processes ``ray.init``
started ahead). The larger row count shows how that amortises. The cells of a row count
take turns, ``--repeat`` times, and the medians are shown.

Then the guarantees the cluster keeps (SPEC §22), on the ``io`` pipeline at the largest
row count, each against the local engine on the same work:

* ``budget``: a run under ``--max-cost`` (a cap it stays under), local and on 2 workers;
  the coordinator's lease calls per request are counted (``genwire.ray``'s debug line).
* ``429s``: the imperfect case, a server admitting ``--admit`` requests/s and answering
  429 + ``Retry-After: 1`` beyond: rows/s as a share of that rate and 429s as a share of
  the requests, local and on 2 workers (one brake per model for the cluster: the first
  429 of an overload on one worker brakes the model on the other).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import genwire
from genwire.generators import Generator, GeneratorMetadata
from genwire.testing import FakeOpenAIServer

HERE = Path(__file__).resolve().parent


class Busy(Generator[Any]):
    """Pure-Python CPU work per row (holds the GIL, like tokenising or parsing would)."""

    metadata = GeneratorMetadata(name="busy", description="burn CPU per row", required_resources={})
    cpu_s = float(os.environ.get("BENCH_CPU_MS", "4")) / 1000

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        out = []
        for _ in rows:
            end = time.thread_time() + self.cpu_s
            n = 0
            while time.thread_time() < end:
                n += 1
            out.append(n)
        return out


def config(url: str, concurrency: int, rows: int, out: Path, cpu: bool) -> dict[str, Any]:
    columns: list[dict[str, Any]] = [
        {"name": "topic", "generator": "sampler", "params": {"kind": "category", "values": ["a", "b", "c"]}},
        {
            "name": "text",
            "generator": "llm-text",
            "resources": {"model": "writer"},
            "params": {"prompt": "Write about {{ topic }}"},
        },
    ]
    if cpu:
        columns.append({"name": "work", "generator": "busy"})
    return {
        "providers": {"srv": {"kind": "openai", "base_url": url, "max_concurrency": concurrency}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "pipeline": {"num_records": rows, "output": str(out), "batch_size": 32, "columns": columns},
    }


class CoordinatorLine(logging.Handler):
    """Keeps the Ray engine's last word on what its coordinator did."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        if "coordinator" in record.getMessage():
            self.last = record.getMessage()


COORDINATOR = CoordinatorLine()


async def measure(
    cfg: dict[str, Any],
    engine: str,
    workers: int | None,
    max_cost_usd: float | None = None,
    server: FakeOpenAIServer | None = None,
) -> tuple[float, int, float]:
    """(rows/s, HTTP requests, seconds from the run's start to its first request at
    ``server``) of one whole run."""
    container = genwire.boot(cfg, generators=[Busy])
    if server is not None:
        server.reset_stats()
    async with container:
        started = time.monotonic()
        result = await container.run(
            skip_preflight=True, engine=engine, ray_workers=workers, max_cost_usd=max_cost_usd, resume=False
        )
    assert result.rows_written == cfg["pipeline"]["num_records"], result
    first = min((when for when, _, _ in server.log), default=started) - started if server is not None else 0.0
    return result.rows_per_s, sum(result.requests.values()), first


def priced(cfg: dict[str, Any]) -> dict[str, Any]:
    cfg["models"]["writer"]["price"] = {"input_per_mtok": 0.15, "output_per_mtok": 0.60}
    cfg["models"]["writer"]["params"] = {"max_tokens": 64}
    return cfg


def lease_calls(line: str) -> int:
    return int(line.split("answered ")[1].split(" ")[0]) if "answered " in line else 0


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rows", type=int, nargs="+", default=[800, 3200])
    parser.add_argument("--cpu-ms", type=float, default=4.0)
    parser.add_argument("--repeat", type=int, default=1, help="runs per cell; the median is shown")
    parser.add_argument("--admit", type=float, default=100.0, help="requests/s the 429 case's server admits")
    args = parser.parse_args()
    os.environ["BENCH_CPU_MS"] = str(args.cpu_ms)  # read by Busy in the workers too
    Busy.cpu_s = args.cpu_ms / 1000

    import ray

    started = time.perf_counter()
    # Workers import Busy from this file by reference: its directory goes on their path
    # through the environment the local Ray inherits (as a plugin installed on every node),
    # not a job runtime_env, whose agent would add most of a second to every worker's start.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    ray.init(
        num_cpus=os.cpu_count() or 2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    print(f"ray.init: {time.perf_counter() - started:.1f} s ({ray.cluster_resources().get('CPU', 0):.0f} CPUs)")
    limit = args.concurrency / args.latency
    print(
        f"fake server {args.latency * 1000:.0f} ms/request, max_concurrency {args.concurrency} "
        f"(I/O limit {limit:.0f} rows/s), busy column {args.cpu_ms:g} ms CPU/row, "
        f"median of {args.repeat}"
    )
    print(f"load average {load()} (2 CPUs shared with whatever else runs)")
    print(
        f"{'pipeline':>9} {'rows':>6} {'engine':>14} {'rows/s':>8} {'of I/O limit':>13} {'vs local':>9} "
        f"{'1st request':>12}"
    )
    cells: list[tuple[str, str, int | None]] = [("local", "local", None), ("ray", "ray 1 worker", 1)]
    cells.append(("ray", "ray 2 workers", 2))
    with FakeOpenAIServer(latency=args.latency) as server, tempfile.TemporaryDirectory() as tmp:
        for cpu in (False, True):
            name = "io+cpu" if cpu else "io"
            for rows in args.rows:
                cfg = config(server.url, args.concurrency, rows, Path(tmp) / "out.jsonl", cpu)
                runs: dict[str, list[tuple[float, int, float]]] = {label: [] for _, label, _ in cells}
                for _ in range(args.repeat):  # the cells take turns: a change of load hits them all
                    for engine, label, workers in cells:
                        runs[label].append(await measure(cfg, engine, workers, server=server))
                local = statistics.median(rate for rate, _, _ in runs["local"])
                for _, label, _ in cells:
                    rate = statistics.median(rate for rate, _, _ in runs[label])
                    first = statistics.median(first for _, _, first in runs[label])
                    share = f"{rate / local:.0%}" if label != "local" else ""
                    print(
                        f"{name:>9} {rows:>6} {label:>14} {rate:>8.1f} {rate / limit:>12.0%} {share:>9} "
                        f"{first:>10.2f} s",
                        flush=True,
                    )
        await guarantees(server, args, Path(tmp), limit)
    print(f"load average {load()}")
    ray.shutdown()


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def guarantees(server: FakeOpenAIServer, args: argparse.Namespace, tmp: Path, limit: float) -> None:
    """The budget and the brake held cluster-wide, against the local engine on the same work."""
    rows = max(args.rows)
    logging.getLogger("genwire.ray").addHandler(COORDINATOR)
    logging.getLogger("genwire.ray").setLevel(logging.DEBUG)
    print(f"\nthe cluster's guarantees, io pipeline, {rows} rows (2 workers)")
    print(f"{'case':>22} {'engine':>14} {'rows/s':>8} {'vs local':>9} {'coordinator calls/request':>26}")
    cases: list[tuple[str, float | None, float | None]] = [
        ("no budget", None, None),
        ("--max-cost (not hit)", 1e6, None),
        (f"429 beyond {args.admit:g} req/s", None, args.admit),
    ]
    engines: list[tuple[str, str, int | None]] = [("local", "local", None), ("ray", "ray 2 workers", 2)]
    for case, cap, admit in cases:
        server.rate_limit(admit, retry_after=1.0, model="writer")
        cfg = priced(config(server.url, args.concurrency, rows, tmp / "out.jsonl", False))
        runs: dict[str, list[tuple[float, int, float]]] = {label: [] for _, label, _ in engines}
        limited: dict[str, float] = {}
        for _ in range(args.repeat):  # taking turns, as above
            for engine, label, workers in engines:
                COORDINATOR.last = ""
                server.reset_stats()
                runs[label].append(await measure(cfg, engine, workers, cap))
                limited[label] = server.rate_limited / max(1, server.total_requests)
        local = statistics.median(r for r, _, _ in runs["local"])
        for engine, label, _ in engines:
            rate = statistics.median(r for r, _, _ in runs[label])
            requests = runs[label][-1][1]
            calls = ""
            if engine == "ray":
                line = COORDINATOR.last
                calls = f"{lease_calls(line) / requests:.4f} ({lease_calls(line)} leases)"
                if admit is not None:
                    calls = "0 (brakes go worker to worker)"
            share = f"{rate / local:.0%}" if engine == "ray" else ""
            of_what = f" ({rate / admit:.0%} of {admit:g}/s, 429s {limited[label]:.1%} of requests)" if admit else ""
            print(f"{case:>22} {label:>14} {rate:>8.1f} {share:>9} {calls:>26}{of_what}", flush=True)
    server.rate_limit(None, model="writer")


if __name__ == "__main__":
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    # Import Busy from the module "ray_scaling" (not "__main__"), so workers can import it too.
    import ray_scaling

    asyncio.run(ray_scaling.main())
