"""How the command line exits (standard library only, loaded first by entry.py): Ctrl-C
and SIGTERM exit 130/143 with one line, never a traceback, and under ``--json`` (``run``,
``preflight``, ``estimate``) stdout holds exactly one JSON object on every exit.

Two phases. Until a command's body starts (imports, argument parsing) there is nothing to
clean up, so a signal ends the process on the spot. Inside a command the signal is
raised as ``KeyboardInterrupt`` (``Terminated`` for SIGTERM) where the command is, so
its ``finally`` blocks and clients close; the command line turns it into the exit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

JSON_COMMANDS = ("run", "preflight", "estimate")  # the commands whose --json promises one object on every exit


class Terminated(KeyboardInterrupt):
    """SIGTERM inside a command, raised like Ctrl-C so one path handles both."""

    signum = signal.SIGTERM


class _Json:
    """Whether this process owes stdout one JSON object, whether it has printed it, and
    the file descriptor it goes to (the real stdout, kept apart by ``divert_stdout``)."""

    wanted = False
    printed = False
    fd: int | None = None


def wants_json(argv: Sequence[str]) -> bool:
    """``run``/``preflight`` with ``--json``, read from the raw arguments: a usage error or
    an interrupt may come before click has parsed them."""
    command = next((a for a in argv if not a.startswith("-")), None)
    return command in JSON_COMMANDS and "--json" in argv


def want_json(argv: Sequence[str]) -> None:
    """Record, from the raw arguments, whether this process owes stdout a JSON object."""
    _Json.wanted = wants_json(argv)


def divert_stdout() -> None:
    """Under ``--json`` stdout holds the JSON object and nothing else: from here on,
    whatever else is written to stdout goes to stderr, and the object to the real stdout.

    Done at the file-descriptor level (fd 1 becomes a copy of fd 2; the real stdout is
    kept on a descriptor of its own), not by swapping ``sys.stdout``: a plugin's
    ``print()``, ``sys.stdout.write`` from any thread, ``sys.__stdout__``, a reference to
    ``sys.stdout`` taken at import, a C library's printf, a child process or a Ray worker's
    forwarded log all end on fd 1, and a swapped ``sys.stdout`` would catch only the first
    few. Only the console script's own process does this (``run_cli``'s caller): under
    click's test runner the test process's descriptors stay its own."""
    if _Json.fd is not None:
        return
    with contextlib.suppress(Exception):  # whatever was buffered before belongs where it was headed
        sys.stdout.flush()
    _Json.fd = os.dup(1)  # not inherited by child processes (PEP 446)
    os.dup2(2, 1)


def _write_json_line(text: str) -> None:
    if _Json.fd is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    data = text.encode("utf-8")
    while data:
        data = data[os.write(_Json.fd, data) :]


def start_command() -> None:
    """A command starts: it has printed no JSON yet (several may run in one process under
    click's test runner)."""
    _Json.printed = False


def emit_json(obj: dict[str, Any], indent: int | None = None) -> None:
    """Print the command's one JSON object (a second one is never printed). Every JSON
    object genwire prints goes through here, and is strict JSON (``json_text``)."""
    if _Json.printed:
        return
    _Json.printed = True
    write_json(obj, indent)


def write_json(obj: Any, indent: int | None = None) -> None:
    """Print one JSON object as strict JSON (``json_text``), on stdout (the one kept for
    JSON when the console script took it over)."""
    _write_json_line(json_text(obj, indent) + "\n")


def json_text(obj: Any, indent: int | None = None) -> str:
    """``obj`` as strict JSON: never ``NaN`` or ``Infinity`` (which no JSON parser but
    Python's reads). Numbers a user gives are finite (the config and the options refuse
    others); a figure that still is not (a bug) prints as null rather than break the
    reader."""
    import json

    try:
        return json.dumps(obj, indent=indent, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), indent=indent, allow_nan=False)


def _finite(value: Any) -> Any:
    import math

    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def emit_json_failure(message: str, **known: Any) -> None:
    """Under ``--json``, the object of an exit that printed none yet: ``ok: false``, the
    error, and whatever is known (``known``)."""
    if _Json.wanted and not _Json.printed:
        emit_json({"ok": False, "error": message, "errors": [message], **known})


def exit_status(exc: SystemExit) -> int:
    """The status ``sys.exit(code)`` leaves with: None is 0, a message is 1."""
    return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


def signal_exit_code(signum: int) -> int:
    return 128 + signum  # the shell's convention: 130 for SIGINT, 143 for SIGTERM


def _exit_at_once(signum: int, frame: FrameType | None) -> None:
    # Nothing to clean up yet: write with os.write (a signal handler must not re-enter a
    # buffered stream that the interrupted code may be writing) and leave.
    if _Json.wanted and not _Json.printed:
        _Json.printed = True
        os.write(
            1 if _Json.fd is None else _Json.fd, b'{"ok": false, "error": "interrupted", "errors": ["interrupted"]}\n'
        )
    os.write(2, b"interrupted\n")
    os._exit(signal_exit_code(signum))


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


REDELIVER_AFTER_S = 0.05  # a swallowed signal is sent again this much later


class _Signals:
    # Only a process started as the command line has its signals changed: click's test
    # runner invokes commands inside a test process, whose handlers stay its own.
    owned = False
    unraisable: Any = sys.unraisablehook  # where genwire's own hook hands other errors on


def take_signals() -> None:
    """The console script starts: from now on this module decides what a signal does."""
    if not _Signals.owned:
        # Registered first, so it runs last of the exit callbacks (after Ray's shutdown and
        # the like): the interpreter's own teardown then puts Python's default handlers
        # back, and a signal in that last instant would kill the finished process (-15).
        import atexit

        atexit.register(_hold_signals)
    _Signals.owned = True
    # Whether stdout owes a JSON object, from the raw arguments the console script was given:
    # a signal right after this line is already answered with the object.
    want_json(sys.argv[1:])
    exit_on_signals()


def _hold_signals() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


def finishing(code: int) -> None:
    """The command has finished with exit ``code``: a signal now only cuts the teardown
    short (threads joining, exit callbacks); it does not change what the command did."""
    if not _Signals.owned:
        return

    def leave(signum: int, frame: FrameType | None) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # the stream may be mid-write: leave anyway
                stream.flush()
        os._exit(code)

    signal.signal(signal.SIGINT, leave)
    signal.signal(signal.SIGTERM, leave)


def exit_on_signals() -> None:
    """Start-up: a signal ends the process at once."""
    if _Signals.owned:
        signal.signal(signal.SIGINT, _exit_at_once)
        signal.signal(signal.SIGTERM, _exit_at_once)


def raise_on_signals() -> None:
    """Inside a command: a signal is raised where the command is (see the module note)."""
    if _Signals.owned:
        signal.signal(signal.SIGINT, _raise_interrupt)
        signal.signal(signal.SIGTERM, _raise_interrupt)
        if sys.unraisablehook is not _redeliver_swallowed:
            _Signals.unraisable = sys.unraisablehook
            sys.unraisablehook = _redeliver_swallowed


def _redeliver_swallowed(unraisable: Any) -> None:
    """A signal whose handler ran inside a finalizer or a C callback raised where Python
    can only print the exception ("Exception ignored in ...") and go on: the interrupt would
    be lost and a traceback shown. Send the signal again instead, from a moment later (sent
    from here, its handler would run inside this hook): it is raised where the command can
    see it (should it land in a finalizer again, this hook sends it once more)."""
    error = unraisable.exc_value
    if isinstance(error, KeyboardInterrupt) and signal.getsignal(signal.SIGINT) is _raise_interrupt:
        import threading

        signum = signal.SIGTERM if isinstance(error, Terminated) else signal.SIGINT
        again = threading.Timer(REDELIVER_AFTER_S, os.kill, (os.getpid(), signum))
        again.daemon = True
        again.start()
        return
    _Signals.unraisable(unraisable)


class _Gc:
    defaults: tuple[int, int, int] | None = None


def start_process(argv: Sequence[str] | None) -> list[str]:
    """A genwire process starts (the console script, or ``python -m genwire.cli.main``):
    signals are taken over, the collector slowed for start-up, and whether stdout owes a
    JSON object recorded. Returns the arguments to run."""
    take_signals()  # again: the handlers may have been changed since this module was imported
    collect_less_while_starting()
    args = list(sys.argv[1:] if argv is None else argv)
    if argv is not None:  # take_signals recorded the process's own arguments; these replace them
        want_json(args)
    if _Json.wanted:
        divert_stdout()  # before any plugin is imported: what plugins print goes to stderr
    return args


def collect_less_while_starting() -> None:
    """Start-up allocates hundreds of thousands of long-lived objects (modules, classes,
    pydantic schemas); the default young-generation threshold (700) runs the collector
    hundreds of times over them for nothing: ~20 ms of ``validate``. Collect rarely until
    the work that makes garbage starts (``steady_gc``)."""
    import gc

    if _Gc.defaults is None:
        _Gc.defaults = gc.get_threshold()
        gc.set_threshold(100_000, 50, 100)


def steady_gc() -> None:
    """A long run: the collector's usual thresholds again."""
    import gc

    if _Gc.defaults is not None:
        gc.set_threshold(*_Gc.defaults)
        _Gc.defaults = None
