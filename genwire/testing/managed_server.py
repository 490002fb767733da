"""``python -m genwire.testing.managed_server``: genwire's fake OpenAI server as an inference
server genwire manages (SPEC §23, a ``command`` server), with the ways a real one starts,
fails and dies, for plugins' tests and genwire's own::

    servers:
      stand_in:
        kind: command
        command: [python, -m, genwire.testing.managed_server, --port, "{port}", --model, my-model,
                  --load-s, "2"]
        model: my-model

* ``--load-s S``: loading for S seconds before it listens (connections refused meanwhile);
* ``--unhealthy-s S``: then ``/health`` answers 503 for S seconds while ``/v1/models``
  already answers 200 (as vLLM's API server does while its engine loads);
* ``--fail-start``: prints a few lines (and the names and values of its environment, as a
  careless server would) and exits with code 3 before it listens;
* ``--crash-after N``: exits (code 1) right after its Nth answer;
* ``--child``: starts a child process that sleeps (a server's worker), which must go with it;
* ``--ignore-term``: ignores SIGTERM (a server stuck in its shutdown: SIGKILL must end it).

``command(model, ...)`` writes that argv for a config (``{port}`` left for genwire).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from aiohttp import web

from genwire.testing.fake_openai.server import FakeOpenAIServer

FAILED_START_CODE = 3
CRASH_CODE = 1


class ManagedFakeServer(FakeOpenAIServer):
    """The fake server, exiting the whole process after ``crash_after`` answers."""

    def __init__(self, *, crash_after: int | None = None, **options: float | int | str) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.crash_after = crash_after
        self.answered = 0

    async def _handle(self, request: web.Request, endpoint: str) -> web.StreamResponse:
        if self.crash_after is not None and self.answered >= self.crash_after:
            os._exit(CRASH_CODE)  # a request after the last answer finds the server dying
        response = await super()._handle(request, endpoint)
        self.answered += 1
        if self.crash_after is not None and self.answered >= self.crash_after:
            # A moment to deliver this answer; the next request finds no server.
            asyncio.get_running_loop().call_later(0.1, os._exit, CRASH_CODE)
        return response


def command(
    model: str,
    *,
    load_s: float = 0.0,
    unhealthy_s: float = 0.0,
    fail_start: bool = False,
    crash_after: int | None = None,
    latency: float = 0.0,
    child: bool = False,
) -> list[str]:
    """The ``command:`` of a ``kind: command`` server running this stand-in for ``model``."""
    argv = ["python", "-m", "genwire.testing.managed_server", "--port", "{port}", "--model", model]
    options = {"--load-s": load_s, "--unhealthy-s": unhealthy_s, "--latency": latency}
    argv += [part for name, value in options.items() if value for part in (name, f"{value:g}")]
    argv += ["--crash-after", str(crash_after)] if crash_after is not None else []
    return argv + ["--fail-start"] * fail_start + ["--child"] * child


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m genwire.testing.managed_server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", required=True, help="the model name it serves (and lists)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--load-s", type=float, default=0.0)
    parser.add_argument("--unhealthy-s", type=float, default=0.0)
    parser.add_argument("--fail-start", action="store_true")
    parser.add_argument("--crash-after", type=int, default=None)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--ignore-term", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(f"loading {args.model}...", flush=True)
    if args.child:
        # Its argv names the model, so a test finds it by name.
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", f"worker-of-{args.model}"])
    if args.fail_start:
        for name, value in sorted(os.environ.items()):
            if name not in ("PATH", "HOME"):
                print(f"env {name}={value}", flush=True)
        print(f"error: could not load {args.model}: out of memory", file=sys.stderr, flush=True)
        sys.exit(FAILED_START_CODE)
    time.sleep(args.load_s)
    server = ManagedFakeServer(crash_after=args.crash_after, latency=args.latency, host=args.host, port=args.port)
    server.known_models = {args.model}
    healthy_at = time.monotonic() + args.unhealthy_s
    server.health_status = lambda: 200 if time.monotonic() >= healthy_at else 503
    server.start()
    print(f"serving {args.model} at {server.url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
