"""Tool calls through genwire's tools handle against the MCP SDK's own session, on the
shipped MCP server (stdio), in the same run.

Cases: the happy path (N ``echo`` calls, C in flight), and the imperfect one (the same
calls while C/4 ``slow`` calls of S seconds hold the server). Each line gives calls per
second for the raw SDK session (the baseline) and for the handle (allow check, listing
lookup, timeout, result bound and secret scrub on every call), and the handle's cost per
call over the baseline. The server process is started once per case and side.

    python benchmarks/tool_calls.py [--calls 2000] [--concurrency 16] [--slow-s 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import genwire
from genwire.generators import Generator, GeneratorMetadata, ResourceKind

SERVER = [sys.executable, "-m", "genwire.testing.mcp_server"]


class _Holder(Generator[Any]):
    metadata = GeneratorMetadata(name="bench-holder", description="x", required_resources={"web": ResourceKind.TOOLS})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [None for _ in rows]


async def _drive(
    call: Callable[[str, dict[str, Any]], Awaitable[Any]], calls: int, concurrency: int, slow: int, slow_s: float
) -> float:
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await call("echo", {"text": f"call {i}"})

    holds = [asyncio.create_task(call("slow", {"seconds": slow_s})) for _ in range(slow)]
    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(calls)))
    elapsed = time.perf_counter() - started
    await asyncio.gather(*holds)
    return calls / elapsed


async def raw_sdk(calls: int, concurrency: int, slow: int, slow_s: float) -> float:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=SERVER[0], args=SERVER[1:])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        return await _drive(session.call_tool, calls, concurrency, slow, slow_s)


async def handle(calls: int, concurrency: int, slow: int, slow_s: float) -> float:
    cfg = {
        "tools": {"web": {"kind": "mcp", "transport": "stdio", "command": SERVER, "env": {"KEY": "bench-secret"}}},
        "pipeline": {"columns": [{"name": "a", "generator": "bench-holder", "resources": {"web": "web"}}]},
    }
    container = genwire.boot(cfg, generators=[_Holder])
    async with container:
        web = container.generator("a").resources.web
        await web.list()
        return await _drive(web.call, calls, concurrency, slow, slow_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--slow-s", type=float, default=0.5)
    args = parser.parse_args()
    print(f"{'case':<34} {'SDK calls/s':>12} {'handle calls/s':>15} {'cost/call':>10}")
    for case, slow in (
        ("happy path", 0),
        (f"{max(1, args.concurrency // 4)} slow calls holding the server", max(1, args.concurrency // 4)),
    ):
        base = asyncio.run(raw_sdk(args.calls, args.concurrency, slow, args.slow_s))
        ours = asyncio.run(handle(args.calls, args.concurrency, slow, args.slow_s))
        cost_us = (1 / ours - 1 / base) * 1e6
        print(f"{case:<34} {base:>12.0f} {ours:>15.0f} {cost_us:>8.0f}µs")


if __name__ == "__main__":
    main()
