"""How a command ends: one clear message per error (exit 2 invalid input, 1 a failed
check or run), no traceback unless ``--debug``; Ctrl-C and SIGTERM as one line (130, 143);
and under ``--json`` the one JSON object on stdout whatever happened. ``handle_errors``
wraps each command, ``run_cli`` the whole process."""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar, cast

import click

from genwire.cli.consoles import err
from genwire.cli.exits import (
    emit_json_failure,
    exit_on_signals,
    exit_status,
    finishing,
    raise_on_signals,
    signal_exit_code,
    start_command,
)
from genwire.errors import ConfigError, GenwireError, PluginError, RunSetupError, WiringError

__all__ = ["handle_errors", "run_cli"]

F = TypeVar("F", bound=Callable[..., Any])

_INVALID = (ConfigError, WiringError, PluginError, RunSetupError)


def _fail(message: str, code: int) -> NoReturn:
    emit_json_failure(message)  # --json: stdout holds one object whatever happened
    err.print("error: " + message, markup=False)
    sys.exit(code)


def _interrupted(exc: BaseException | None) -> NoReturn:
    """Ctrl-C (130) or SIGTERM (143): one line, and under --json the object saying so."""
    exit_on_signals()  # a second signal while leaving ends the process at once
    signum = getattr(exc, "signum", signal.SIGINT)
    emit_json_failure("interrupted")
    sys.stderr.write("interrupted\n")
    sys.exit(signal_exit_code(signum))


def signal_inside(exc: BaseException) -> KeyboardInterrupt | None:
    """The interrupt an exception was raised from, if any: a signal that lands inside a
    class statement (a module being imported) reaches us as Python 3.11's RuntimeError
    "Error calling __set_name__", caused by the KeyboardInterrupt."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def run_cli(group: click.Group, args: Sequence[str]) -> NoReturn:
    """Run the command line and exit. Click's usage errors (exit 2) are shown as click
    shows them, and under ``--json`` also as the one JSON object on stdout."""
    try:
        try:
            result = group.main(list(args), prog_name="genwire", standalone_mode=False)
        except click.ClickException as exc:
            emit_json_failure(exc.format_message())
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort as exc:  # an interrupt that reached click (its prompts, its teardown)
            _interrupted(exc.__cause__)
        except KeyboardInterrupt as exc:
            _interrupted(exc)
        except Exception as exc:  # a bug: its traceback follows, and --json still gets its object
            interrupt = signal_inside(exc)
            if interrupt is not None:
                _interrupted(interrupt)
            emit_json_failure(f"internal error: {type(exc).__name__}: {exc}")
            raise
        sys.exit(result if isinstance(result, int) else 0)
    except SystemExit as exc:
        code = exit_status(exc)
        if code != 0:
            emit_json_failure(f"exit status {code}")
        finishing(code)
        raise


def handle_errors(fn: F) -> F:
    """One message per error, no traceback unless --debug; the exit code says what kind."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = click.get_current_context().find_root().params.get("debug", False)
        start_command()
        raise_on_signals()  # from here a signal unwinds the command (clients close), see exits.py
        try:
            try:
                result = fn(*args, **kwargs)
            except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM as exits.Terminated
                if debug:
                    raise
                _interrupted(exc)
            except _INVALID as exc:
                if debug:
                    raise
                _fail(str(exc), 2)
            except GenwireError as exc:
                if debug:
                    raise
                _fail(str(exc), 1)
            except Exception as exc:  # a bug, unless a signal raised it (inside an import)
                interrupt = signal_inside(exc)
                if interrupt is None or debug:
                    raise
                _interrupted(interrupt)
        except SystemExit as exc:
            finishing(exit_status(exc))  # the outcome is decided: a late signal keeps it
            raise
        except BaseException:
            exit_on_signals()
            raise
        finishing(0)
        return result

    return cast(F, wrapper)
