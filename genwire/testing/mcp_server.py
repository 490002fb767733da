"""A small MCP server for tests and the examples: ``python -m genwire.testing.mcp_server``.

Tools (all scripted, deterministic):

* ``search(query, k=3)``: the passages of ``--docs DIR`` (.txt/.md files, split on blank
  lines) that share the most words with ``query``, as JSON ``[{id, text, score}]``;
* ``echo(text)``; ``slow(seconds)`` (sleeps, then answers); ``fail(message)`` (a tool
  error: ``isError`` true); ``crash()`` (the process exits at once); ``crash_once()``
  (exits the first time, answers after a restart; needs ``--state DIR``);
  ``env_names()`` (the names of the process's environment variables); ``pid()``.

Options: ``--transport stdio|http``, ``--port`` (http, on 127.0.0.1), ``--only a,b`` (list
only these tools), ``--pid-file PATH`` (written at start), ``--calls-file PATH`` (a line
appended as each call starts, so a test can wait for one), ``--state DIR``,
``--bad-schema TOOL`` (list TOOL with an input schema that is not a valid JSON Schema),
``--leak VAR`` (write the value of variable VAR to stderr and, as lines that are not
JSON-RPC, to stdout, at the start and at each call, at every offset of a line: a secret
that must reach no output of genwire's), ``--big-mb N`` (``big()`` answers N MB of text).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

_WORD = re.compile(r"[a-z0-9]+")


def passages(docs: Path | None) -> list[dict[str, str]]:
    if docs is None:
        return []
    out = []
    for path in sorted(docs.rglob("*")):
        if path.suffix in (".txt", ".md") and path.is_file():
            parts = [p.strip() for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]
            out += [{"id": f"{path.name}#{i}", "text": text} for i, text in enumerate(parts)]
    return out


def search(corpus: list[dict[str, str]], query: str, k: int) -> list[dict[str, Any]]:
    wanted = set(_WORD.findall(query.lower()))
    scored: list[dict[str, Any]] = []
    for item in corpus:
        words = set(_WORD.findall(item["text"].lower()))
        score = len(wanted & words) / (len(wanted) or 1)
        if score > 0:
            scored.append({"id": item["id"], "text": item["text"], "score": round(score, 4)})
    scored.sort(key=lambda s: (-float(s["score"]), str(s["id"])))
    return scored[: max(k, 0)]


def build(args: argparse.Namespace) -> Any:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("genwire-test-tools", log_level="ERROR")
    corpus = passages(Path(args.docs) if args.docs else None)
    only = set(args.only.split(",")) if args.only else None

    def note(name: str) -> None:
        leak(args.leak)
        if args.calls_file:
            with open(args.calls_file, "a", encoding="utf-8") as f:
                f.write(f"{name} {os.getpid()}\n")

    def tool(fn: Any) -> Any:
        if only is None or fn.__name__ in only:
            server.tool()(fn)
        return fn

    @tool
    def search_docs(query: str, k: int = 3) -> str:
        """Search the documents; returns the best passages as JSON."""
        note("search_docs")
        return json.dumps(search(corpus, query, k))

    @tool
    def echo(text: str) -> str:
        """Return the text."""
        note("echo")
        return text

    @tool
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        import anyio

        note("slow")
        await anyio.sleep(seconds)
        return f"slept {seconds:g}s"

    @tool
    def fail(message: str) -> str:
        """Always fails (a tool error)."""
        note("fail")
        raise ToolError(message)

    @tool
    def crash() -> str:
        """The process exits at once."""
        note("crash")
        os._exit(3)

    @tool
    def crash_once() -> str:
        """Exits the first time it is called, answers after that."""
        note("crash_once")
        marker = Path(args.state or ".") / "crashed-once"
        if not marker.exists():
            marker.write_text("1")
            os._exit(3)
        return "ok after restart"

    @tool
    def env_names() -> str:
        """The names of this process's environment variables."""
        note("env_names")
        return json.dumps(sorted(os.environ))

    @tool
    def big() -> str:
        """A text of --big-mb megabytes."""
        note("big")
        return "x" * int(args.big_mb * (1 << 20))

    @tool
    def pid() -> str:
        """This process's id."""
        return str(os.getpid())

    if args.bad_schema:  # advertise a tool whose input schema is not a valid JSON Schema
        broken = server._tool_manager.get_tool(args.bad_schema)
        if broken is not None:
            broken.parameters = {"type": "object", "properties": {"q": {"type": 12}}}
    return server


def leak(variable: str | None) -> None:
    """The value of ``variable`` on stderr and stdout (raw lines, not JSON-RPC), once at each
    offset of a line (0 to its length), so that any cut of a line falls inside it somewhere."""
    if not variable:
        return
    value = os.environ.get(variable, "")
    for offset in range(len(value) + 1):
        line = f"{'.' * offset}{value}{'.' * (len(value) - offset)}\n".encode()
        os.write(2, line)
        os.write(1, line)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m genwire.testing.mcp_server")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--docs")
    parser.add_argument("--only")
    parser.add_argument("--pid-file")
    parser.add_argument("--pids-file", help="append this process's id (several servers share the file)")
    parser.add_argument("--calls-file")
    parser.add_argument("--state")
    parser.add_argument("--bad-schema", metavar="TOOL")
    parser.add_argument("--leak", metavar="VAR")
    parser.add_argument("--big-mb", type=float, default=1.0)
    args = parser.parse_args(argv)
    leak(args.leak)
    if args.pid_file:
        Path(args.pid_file).write_text(str(os.getpid()))
    if args.pids_file:
        with open(args.pids_file, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    server = build(args)
    if args.transport == "stdio":
        server.run("stdio")
    else:
        import logging

        logging.getLogger("uvicorn").setLevel(logging.WARNING)
        server.run("streamable-http", host="127.0.0.1", port=args.port, json_response=True)
    time.sleep(0)
    sys.exit(0)


if __name__ == "__main__":
    main()
