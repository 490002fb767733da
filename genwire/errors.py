"""genwire's public exceptions. Every message says what is wrong, where, and what to do."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any


class GenwireError(Exception):
    """Base class of every error genwire raises on purpose."""


def exception_text(exc: BaseException) -> str:
    """``Type: message`` (just ``Type`` when it has no message), for errors that wrap
    someone else's exception. One definition, so every wrapped error reads alike."""
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Control characters (Cc), format characters (Cf: the bidi overrides U+202A-U+202E and
# isolates U+2066-U+2069, zero-width marks, the BOM) and line/paragraph separators.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def plural(count: int, one: str, many: str | None = None) -> str:
    """``1 request``, ``2 requests``: a count and the word that agrees with it (every
    message that counts says it this way, never ``1 requests`` or ``check(s)``)."""
    return f"{count:,} {one if count == 1 else (many or one + 's')}"


def printable(text: str) -> str:
    """``text`` safe to print inside a message, a location or a table cell: control and
    bidi characters written as escapes (``\\n``, ``\\u202e``), so a name holding them can
    neither break a line nor reorder what the terminal shows around it. One definition:
    every location and every table cell goes through it."""
    if text.isprintable():  # the common case, at C speed (spaces and ordinary letters pass)
        return text
    import unicodedata

    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif unicodedata.category(ch) in _UNSAFE_CATEGORIES:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


SHOWN_PROBLEMS = 50  # a generated config can have thousands; the first ones say enough


class ProblemsError(GenwireError):
    """An error made of several located problems, all kept in ``problems``."""

    title = "error"

    def __init__(self, problems: Sequence[str] | str) -> None:
        from genwire.scrub import without_userinfo  # every located problem: no URL's password

        self.problems = [without_userinfo(p) for p in ([problems] if isinstance(problems, str) else problems)]
        count = len(self.problems)
        head = self.title if count == 1 else f"{self.title} ({count} problems)"
        lines = [f"  {p}" for p in self.problems[:SHOWN_PROBLEMS]]
        if count > SHOWN_PROBLEMS:
            lines.append(f"  ... and {count - SHOWN_PROBLEMS} more")
        super().__init__(head + ":\n" + "\n".join(lines))


class ConfigError(ProblemsError):
    """The configuration file is invalid. ``problems`` holds one line per problem."""

    title = "invalid configuration"


class WiringError(ProblemsError):
    """Columns bind resources that do not fit the generators' declarations."""

    title = "wiring error"


class PluginError(ProblemsError):
    """A generator plugin could not be loaded or used."""

    title = "plugin error"


class UndeclaredResourceError(GenwireError, AttributeError, KeyError):
    """A generator reached for a resource slot its metadata does not declare."""

    def __init__(self, generator: str, column: str, slot: str, declared: Sequence[str]) -> None:
        self.generator = generator
        self.column = column
        self.slot = slot
        have = ", ".join(sorted(declared)) or "none"
        msg = (
            f"generator {generator!r} (column {column!r}) used resource slot {slot!r}, "
            f"which its metadata does not declare (declared: {have}). "
            f"Declare it in the generator's metadata, e.g. "
            f"required_resources={{..., {slot!r}: ResourceKind.<KIND>}}, "
            f"and bind it in column {column!r}'s resources."
        )
        Exception.__init__(self, msg)

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0])


class UndeclaredToolError(UndeclaredResourceError):
    """A generator called a tool its tool server's ``allow`` does not list (or that the
    server does not have): the same error, and the same stop, as an undeclared model."""

    def __init__(self, server: str, column: str | None, tool: str, allowed: Sequence[str], *, listed: bool) -> None:
        self.generator = ""
        self.column = column or ""
        self.slot = tool
        self.server = server
        where = f"column {column!r}" if column else "a generator"
        have = ", ".join(sorted(allowed)) or "none"
        if listed:
            why = f"which is not in tools.{server}.allow (allowed: {have})"
            fix = f"Add {tool!r} to tools.{server}.allow in genwire.yaml if the generator may call it."
        else:
            why = f"which the server does not offer (its tools: {have})"
            fix = "Check the tool's name."
        Exception.__init__(self, f"{where} called tool {tool!r} of tool server {server!r}, {why}. {fix}")


class ErrorClass(StrEnum):
    """How a model or dataset call failed; decides whether retrying can help."""

    AUTH = "auth"
    NOT_FOUND = "not_found"
    UNREACHABLE = "unreachable"
    TIMEOUT = "timeout"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    BAD_RESPONSE = "bad_response"
    CANCELLED = "cancelled"  # batch mode: the batch holding the request was cancelled by the user
    BUDGET = "budget"  # not sent: the run's budget (SPEC §16) has no room for the request
    START_FAILED = "start_failed"  # a managed server (SPEC §23) exited before it was ready
    PORT_IN_USE = "port_in_use"  # a managed server's port is held by another process
    STOPPING = "stopping"  # not sent: the run is stopping (its failure rate passed max_failure_rate)

    @property
    def transient(self) -> bool:
        return self in _TRANSIENT


_TRANSIENT = {ErrorClass.UNREACHABLE, ErrorClass.TIMEOUT, ErrorClass.RATE_LIMITED, ErrorClass.SERVER_ERROR}


class ModelError(GenwireError):
    """A model call failed. ``error_class`` classifies it; messages never carry secrets."""

    def __init__(
        self,
        error_class: ErrorClass,
        message: str,
        *,
        target: str | None = None,
        retry_after: float | None = None,
        attempts: int = 1,
    ) -> None:
        self.error_class = error_class
        self.message = message
        self.target = target
        self.retry_after = retry_after
        self.attempts = attempts
        where = f"{target}: " if target else ""
        super().__init__(f"{where}{error_class.value}: {message}")

    @property
    def transient(self) -> bool:
        return self.error_class.transient


class NotSent(ModelError):
    """A request was refused before it was sent: its row is *dropped*, neither kept nor
    failed (never in the errors file); a resumed run generates it."""


class BudgetExhausted(NotSent):
    """A request was not sent: its worst case does not fit in what is left of the
    budget. Its row is neither kept nor failed; a resumed run generates it."""

    def __init__(self, message: str, *, target: str | None = None) -> None:
        super().__init__(ErrorClass.BUDGET, message, target=target)


class RunStopping(NotSent):
    """A request was not sent: the run is stopping (``max_failure_rate`` was passed), so
    the rows still waiting to send are dropped for the rerun, not failed."""

    def __init__(self) -> None:
        super().__init__(ErrorClass.STOPPING, "not sent: the run is stopping (max_failure_rate)")


class DatasetError(GenwireError):
    """A dataset could not be opened or read; names the file and, where known, the line."""


class RunError(GenwireError):
    """The run stopped (failure-rate threshold, a generator bug, an interrupted write)."""


class BatchModeFailed(RunError):
    """Batch mode's collector cannot go on (a spool or journal file it cannot write, a
    bug): the run stops with this one message; the checkpoint and its journal stay."""


class RunSetupError(RunError):
    """The run cannot start as asked (an output it must not overwrite, a checkpoint of
    another configuration, another run on the same output). Nothing was sent; exit 2."""


class RunStopped(RunError):
    """The run stopped above ``max_failure_rate``; the rows done so far are kept in the
    checkpoint (``checkpoint``) and a rerun resumes them."""

    def __init__(self, message: str, *, checkpoint: Any, kept: int) -> None:
        self.checkpoint = checkpoint
        self.kept = kept
        super().__init__(message)


class BudgetStopped(RunError):
    """The run stopped at its budget (exit 3): nothing more fit, in-flight requests
    finished, the rows done are kept in ``checkpoint``; a higher cap resumes."""

    def __init__(
        self,
        message: str,
        *,
        checkpoint: Any,
        kept: int,
        spent_usd: float | None,
        cap_usd: float | None,
        result: Any = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.kept = kept
        self.spent_usd = spent_usd
        self.cap_usd = cap_usd
        self.result = result  # the session's RunResult (its summary and cost), as at a finished run
        # A gated run (SPEC §21): kept, wanted, candidates, rate, ... for ``--json``.
        self.funnel: dict[str, Any] | None = None
        super().__init__(message)


class CandidatesExhausted(BudgetStopped):
    """A gated run tried ``pipeline.max_candidates`` candidates before it kept the rows it
    wants (exit 3, as the budget): a higher cap on the same command goes on (SPEC §21)."""
