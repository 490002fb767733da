"""``python -m genwire.testing.serve``: genwire's fake OpenAI-compatible server in its own
process, to try a pipeline (or the cost estimate, or a budget) without a key or a GPU.

It serves ``/v1/chat/completions``, ``/v1/embeddings``, ``/v1/models`` and the Files and
Batches API for any model name and any API key, prints its base URL (e.g.
``http://127.0.0.1:8011/v1``) on the first line of its output, and serves until it is
stopped (Ctrl-C or SIGTERM). Its own process does not share the GIL with the client, which
keeps benchmarks of the client honest at high request rates."""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from types import FrameType

from genwire.testing.fake_openai.server import FakeOpenAIServer
from genwire.testing.fake_openai.usage import RealisticUsage

EXAMPLE = """\
example (a pipeline whose provider has base_url: http://127.0.0.1:8011/v1):
  python -m genwire.testing.serve --port 8011 --latency 0.2 --realistic-usage --advertise-requests 6000
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m genwire.testing.serve",
        description=(__doc__ or "").replace("``", ""),
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_argument_group("where it listens")
    where.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    where.add_argument("--port", type=_port, default=0, help="port to listen on (default: 0, any free port)")
    answers = parser.add_argument_group("its answers")
    answers.add_argument("--latency", type=_seconds, default=0.0, help="seconds before each answer (default: 0)")
    answers.add_argument("--dimensions", type=_positive_int, default=384, help="embedding size (default: 384)")
    answers.add_argument("--api-key", default=None, help="answer 401 to a request without this bearer token")
    answers.add_argument(
        "--pad-mb", type=float, default=0.0, help="MiB of whitespace before every answer (inf: endless; default: 0)"
    )
    answers.add_argument(
        "--fail-rate",
        type=_fraction,
        default=0.0,
        help="the share of requests answered with an error instead, at random (seeded by --seed; default: 0)",
    )
    answers.add_argument(
        "--fail-status", type=_status, default=503, help="the HTTP status of those errors (default: %(default)s)"
    )
    answers.add_argument(
        "--vary-structured",
        action="store_true",
        help="structured answers vary with the prompt (a judge's bounded score differs per prompt)",
    )
    usage = parser.add_argument_group("realistic usage (for cost estimates and budgets)")
    usage.add_argument(
        "--realistic-usage",
        action="store_true",
        help="report token counts as a hosted model does: prompt tokens about characters / 4, answers "
        "of varying length (at most max_tokens) that are that long (default: one token a word)",
    )
    usage.add_argument(
        "--completion-mean",
        type=_positive_int,
        default=RealisticUsage.completion_mean,
        help="with --realistic-usage: the mean answer length in tokens (default: %(default)s)",
    )
    usage.add_argument("--seed", type=int, default=0, help="the seed of answer lengths and of --fail-rate")
    limits = parser.add_argument_group("advertised rate limits (x-ratelimit-limit-* headers, not enforced)")
    limits.add_argument("--advertise-requests", type=_positive_int, help="requests per minute the answers advertise")
    limits.add_argument("--advertise-tokens", type=_positive_int, help="tokens per minute the answers advertise")
    return parser


def _port(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return value


def _positive_int(text: str) -> int:
    value = _int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share between 0 and 1")
    return value


def _status(text: str) -> int:
    value = _int(text)
    if not 400 <= value <= 599:
        raise argparse.ArgumentTypeError(f"{text!r} is not an HTTP error status (400-599)")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (0 or more)")
    return value


def main(argv: Sequence[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    server = FakeOpenAIServer(latency=args.latency, dimensions=args.dimensions, host=args.host, port=args.port)
    server.require_api_key(args.api_key)
    server.pad_answers("*", args.pad_mb)
    server.vary_structured("*", args.vary_structured)
    if args.realistic_usage:
        server.realistic_usage("*", RealisticUsage(completion_mean=args.completion_mean, seed=args.seed))
    if args.fail_rate:
        server.fail_rate("*", args.fail_rate, (args.fail_status,), seed=args.seed)
    if args.advertise_requests or args.advertise_tokens:
        server.advertise_limits("*", requests=args.advertise_requests, tokens=args.advertise_tokens)
    try:
        server.start()
    except RuntimeError as exc:  # the port is taken, or the host is not this machine's
        cause = exc.__cause__ or exc
        why = getattr(cause, "strerror", None) or cause
        parser.exit(2, f"error: cannot listen on {args.host}:{args.port}: {why}\n")

    def stop(signum: int, frame: FrameType | None) -> None:
        # Raised, as Ctrl-C raises KeyboardInterrupt: a handler that set an Event could
        # deadlock on the Event's lock when the signal lands inside the main thread's wait().
        raise _Stopped

    try:
        with contextlib.suppress(KeyboardInterrupt, _Stopped):
            signal.signal(signal.SIGTERM, stop)
            print(server.url, flush=True)
            while True:
                time.sleep(3600)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopping already
        server.stop()


class _Stopped(Exception):
    """SIGTERM: a normal ending."""


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
