"""The one scrubber: what genwire shows, logs, keeps or exports holds no secret.

Every text that may echo a secret (an endpoint's error body, a tool server's stderr, an
exception's text, a library's log record, a span's status) goes through ``scrub`` before it
is shown, kept or cut: a cut made first could split a secret and let the rest of it
through, so ``excerpt`` and ``tail`` scrub, then cut. A URL's ``user:password@`` is
removed from any text that goes through here, and from config messages
(``without_userinfo``).

Secrets are either passed by their owner (a provider's key, a tool server's ``env``) or
remembered process-wide (``remember``) for texts that no owner sees: the log records of a
library (the MCP SDK) are scrubbed of every secret remembered (``route_logging``).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable

__all__ = [
    "MASK",
    "excerpt",
    "remember",
    "route_logging",
    "scrub",
    "show_tracebacks",
    "tail",
    "without_urls",
    "without_userinfo",
]

MASK = "***"
# Shorter values are placeholders ("EMPTY", "1") that guard nothing; masking them would
# mangle every message ("HTTP 40*** from http://***27.0...").
DEFAULT_MIN_CHARS = 4
# ``scheme://user:password@host``: everything between ``//`` and the last ``@`` before the
# path (a password may itself hold '@' or ':').
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s'\"<>]*@")
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"<>]*[^\s'\"<>.,:;)]")
_remembered: set[str] = set()
_debug = False


def scrub(text: str, secrets: Iterable[str] = (), min_chars: int = DEFAULT_MIN_CHARS) -> str:
    """``text`` with every secret (those given, and those remembered) masked and every
    URL's userinfo removed. The longest secret first: one that holds another is masked whole."""
    values = {s for s in secrets if len(s) >= min_chars} | _remembered
    for value in sorted(values, key=len, reverse=True):
        if value in text:
            text = text.replace(value, MASK)
    return without_userinfo(text)


def excerpt(text: str, limit: int, secrets: Iterable[str] = (), min_chars: int = DEFAULT_MIN_CHARS) -> str:
    """The first ``limit`` characters of ``text``, scrubbed before the cut."""
    clean = scrub(text, secrets, min_chars)
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def tail(text: str, limit: int, secrets: Iterable[str] = (), min_chars: int = DEFAULT_MIN_CHARS) -> str:
    """The last ``limit`` characters of ``text``, scrubbed before the cut."""
    clean = scrub(text, secrets, min_chars)
    return clean if len(clean) <= limit else "…" + clean[-(limit - 1) :]


def without_userinfo(text: str) -> str:
    """``text`` with the ``user:password@`` of every URL in it removed."""
    return _USERINFO.sub(r"\1", text) if "@" in text else text


def without_urls(text: str) -> str:
    """``text`` with every URL replaced by ``<url>`` (a span carries no URL)."""
    return _URL.sub("<url>", text) if "://" in text else text


def remember(secret: str, min_chars: int = DEFAULT_MIN_CHARS) -> None:
    """Scrub ``secret`` from every text from now on (log records of libraries included)."""
    if len(secret) >= min_chars:
        _remembered.add(secret)


def show_tracebacks(show: bool = True) -> None:
    """``--debug``: library log records keep their traceback (scrubbed)."""
    global _debug
    _debug = show


def tracebacks_shown() -> bool:
    """Whether ``--debug`` was given: libraries (Ray) may speak on the terminal then."""
    return _debug


class _ScrubbingHandler(logging.Handler):
    """Writes a library's records to the current ``sys.stderr``, scrubbed, with no traceback
    unless ``--debug``."""

    def __init__(self, label: str) -> None:
        super().__init__(logging.WARNING)
        self.label = label

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = scrub(record.getMessage())
            if _debug and record.exc_info:
                text += "\n" + scrub(logging.Formatter().formatException(record.exc_info))
            elif record.exc_info and record.exc_info[1] is not None:
                text += f" ({type(record.exc_info[1]).__name__})"  # no text: it may hold what was read
            sys.stderr.write(f"genwire: {self.label}: {text}\n")
            sys.stderr.flush()
        except Exception:  # a log line never breaks the run
            self.handleError(record)


def route_logging(logger_name: str, label: str) -> None:
    """Records of ``logger_name`` (and its children) go through the scrubber only."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(h, _ScrubbingHandler) for h in logger.handlers):
        logger.addHandler(_ScrubbingHandler(label))
        logger.propagate = False
        if logger.level == logging.NOTSET or logger.level > logging.WARNING:
            logger.setLevel(logging.WARNING)
