"""What a misbehaving stdio tool server costs genwire, against the MCP SDK's own
``stdio_client`` in the same run (issue 41, items 14 and 15).

Cases, each in a fresh process (its peak RSS is its own):

* happy: a 1 MB result, ``max_result_mb: 8``: answered;
* imperfect: a 20 MB result, ``max_result_mb: 8``: genwire drops it as it is read
  (``bad_response``); the SDK's session reads and parses it whole (baseline);
* a server stuck in ``initialize``, given up after 2 s: how long closing takes (genwire
  kills its process group at once; the SDK closes stdin and waits out its grace periods).

    python benchmarks/tool_bounds.py [--big-mb 20]

(The SDK's reader joins and splits its whole buffer at every chunk: its time grows with
the square of a message's size, 231 s for 50 MB on a loaded 2-core machine.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import time
from typing import Any

SERVER = [sys.executable, "-m", "genwire.testing.mcp_server"]
STUCK = [sys.executable, "-c", "import time; time.sleep(300)"]


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _genwire_call(mb: float) -> dict[str, Any]:
    import genwire
    from genwire.generators import Generator, GeneratorMetadata, ResourceKind

    class Holder(Generator[Any]):
        metadata = GeneratorMetadata(name="holder", description="x", required_resources={"web": ResourceKind.TOOLS})

        async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
            return [None for _ in rows]

    tool = {"kind": "mcp", "transport": "stdio", "command": [*SERVER, "--big-mb", str(mb)], "max_result_mb": 8}
    tool["timeout_s"] = 300
    columns = [{"name": "a", "generator": "holder", "resources": {"web": "web"}}]
    cfg = {"tools": {"web": tool}, "pipeline": {"columns": columns}}
    container = genwire.boot(cfg, generators=[Holder])
    async with container:
        handle = container.resource("web")
        await handle.list()
        started = time.perf_counter()
        try:
            result = await handle.call("big", {})
            outcome = f"answered {len(result.text) / (1 << 20):.0f} MB"
        except genwire.ModelError as exc:
            outcome = exc.error_class.value
        took = time.perf_counter() - started
    return {"outcome": outcome, "s": took, "rss": _rss_mib()}


async def _sdk_call(mb: float) -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=SERVER[0], args=[*SERVER[1:], "--big-mb", str(mb)])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        started = time.perf_counter()
        result = await session.call_tool("big", {})
        took = time.perf_counter() - started
        size = sum(len(getattr(b, "text", "")) for b in result.content)
    return {"outcome": f"answered {size / (1 << 20):.0f} MB", "s": took, "rss": _rss_mib()}


async def _genwire_stuck() -> dict[str, Any]:
    from genwire.config.tools import StdioToolServerConfig
    from genwire.providers.tools.server import McpToolServer

    server = McpToolServer("web", StdioToolServerConfig(kind="mcp", transport="stdio", command=STUCK))
    try:
        async with asyncio.timeout(2):
            await server.listing()
    except TimeoutError:
        pass
    started = time.perf_counter()
    await server.aclose()
    return {"outcome": "closed", "s": time.perf_counter() - started, "rss": _rss_mib()}


async def _sdk_stuck() -> dict[str, Any]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=STUCK[0], args=STUCK[1:])
    started = 0.0
    try:
        async with asyncio.timeout(2):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                try:
                    await session.initialize()
                finally:
                    started = time.perf_counter()
    except TimeoutError:
        pass
    return {"outcome": "closed", "s": time.perf_counter() - started, "rss": _rss_mib()}


CASES = {
    "genwire-call": _genwire_call,
    "sdk-call": _sdk_call,
    "genwire-stuck": _genwire_stuck,
    "sdk-stuck": _sdk_stuck,
}


def _measure(case: str, *args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--case", case, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{case} failed:\n{proc.stderr}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--big-mb", type=float, default=20)
    parser.add_argument("--case", choices=sorted(CASES))
    parser.add_argument("--mb", type=float, default=1)
    args = parser.parse_args()
    if args.case:
        fn = CASES[args.case]
        result = asyncio.run(fn(args.mb) if args.case.endswith("call") else fn())  # type: ignore[operator]
        print(json.dumps(result))
        return
    print(f"{'case':<40}{'SDK (baseline)':>36}{'genwire':>36}")
    for label, mb in (
        ("happy: 1 MB result, max_result_mb 8", 1.0),
        (f"{args.big_mb:g} MB result, max_result_mb 8", args.big_mb),
    ):
        sdk, ours = _measure("sdk-call", "--mb", str(mb)), _measure("genwire-call", "--mb", str(mb))
        cells = [f"{r['outcome']}, {r['s']:.1f}s, {r['rss']:.0f} MiB" for r in (sdk, ours)]
        print(f"{label:<40}{cells[0]:>36}{cells[1]:>36}")
    sdk, ours = _measure("sdk-stuck"), _measure("genwire-stuck")
    print(f"{'stuck in initialize: closing took':<40}{sdk['s']:>35.2f}s{ours['s']:>35.2f}s")


if __name__ == "__main__":
    main()
