"""``python -m genwire.testing.serve``: a FakeOpenAIServer in its own process. Prints the
base URL, serves until killed. A separate process does not share the GIL with the client,
which keeps benchmarks of the client honest at high request rates."""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence

from genwire.testing.fake_server import FakeOpenAIServer


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per request")
    parser.add_argument("--dimensions", type=int, default=384, help="embedding size")
    parser.add_argument("--api-key", default=None, help="require this bearer token")
    parser.add_argument(
        "--pad-mb", type=float, default=0.0, help="MiB of whitespace before every answer (inf: endless)"
    )
    parser.add_argument(
        "--vary-structured",
        action="store_true",
        help="structured answers vary with the prompt (a judge's bounded score differs per prompt)",
    )
    args = parser.parse_args(argv)
    with FakeOpenAIServer(latency=args.latency, dimensions=args.dimensions) as server:
        server.require_api_key(args.api_key)
        server.pad_answers("*", args.pad_mb)
        server.vary_structured("*", args.vary_structured)
        print(server.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


@contextlib.contextmanager
def served(*args: str) -> Iterator[str]:
    """``python -m genwire.testing.serve ARGS...`` in its own process (for benchmarks);
    yields its base URL and stops it on exit."""
    cmd = [sys.executable, "-m", "genwire.testing.serve", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


if __name__ == "__main__":
    main()
