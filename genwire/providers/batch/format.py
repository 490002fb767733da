"""The OpenAI Batch file format: one request per line in, one result per line out."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

__all__ = ["BatchInfo", "ResultLine", "bounded_lines", "custom_id_in", "parse_result", "request_id", "request_line"]

# A batch that ended in one of these statuses will not change any more.
TERMINAL = frozenset({"completed", "expired", "cancelled", "failed"})
# Error codes of lines the batch never ran: they are resubmitted, not failed.
NOT_RUN = frozenset({"batch_expired", "batch_cancelled"})


def request_id(base: str, occurrence: int) -> str:
    """A stable ``custom_id``: the request's identity (its response cache key, or its
    endpoint, body and column) and how many times this run asked it before (a re-ask of
    the same body gets a new id)."""
    return hashlib.sha256(f"{base}#{occurrence}".encode()).hexdigest()[:32]


def uncached_base(endpoint: str, path: str, body: Any, column: str | None) -> str:
    """The identity of a request no row was said for (never cached, still batched)."""
    text = json.dumps([endpoint, path, body, column], sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def request_line(custom_id: str, path: str, body: dict[str, Any]) -> bytes:
    line = {"custom_id": custom_id, "method": "POST", "url": "/v1" + path, "body": body}
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"


@dataclass(frozen=True)
class ResultLine:
    """One line of an output or error file. ``status`` is the HTTP status the request got
    (None when the batch never ran it: ``error_code`` says why)."""

    custom_id: str
    status: int | None
    body: Any
    error_code: str | None
    error_message: str


def parse_result(raw: bytes) -> ResultLine | None:
    """A result line, or None when it is not one (skipped: its request is resubmitted)."""
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("custom_id"), str):
        return None
    response, error = record.get("response"), record.get("error")
    if isinstance(response, dict) and type(response.get("status_code")) is int:
        return ResultLine(record["custom_id"], response["status_code"], response.get("body"), None, "")
    code = message = ""
    if isinstance(error, dict):
        code = str(error.get("code") or "")
        message = str(error.get("message") or "")
    return ResultLine(record["custom_id"], None, None, code or "unknown", message)


_HEAD = 4096  # of a line past the bound: kept to find its custom_id
_SKIP_CHUNK = 1 << 20
_CUSTOM_ID = re.compile(rb'"custom_id"\s*:\s*"([^"\\]{1,200})"')


def bounded_lines(handle: IO[bytes], limit: int) -> Iterator[tuple[bytes, bool]]:
    """The lines of a file as a stream, each read up to ``limit`` bytes: ``(line, True)``,
    or ``(its first bytes, False)`` for a line past the bound (the rest is skipped
    unread into memory), so one huge line never costs more than ``limit``."""
    while True:
        line = handle.readline(limit + 1)
        if not line:
            return
        if len(line) <= limit or line.endswith(b"\n"):
            yield line, True
            continue
        head = line[:_HEAD]
        del line
        while (rest := handle.readline(_SKIP_CHUNK)) and not rest.endswith(b"\n"):
            pass
        yield head, False


def custom_id_in(head: bytes) -> str | None:
    """The ``custom_id`` of a line from its first bytes (a line too long to parse)."""
    match = _CUSTOM_ID.search(head)
    return match.group(1).decode("utf-8", "replace") if match else None


@dataclass
class BatchInfo:
    """What ``--json`` and the progress say of one batch."""

    id: str
    provider: str
    status: str
    requests: int
    completed: int = 0
    failed: int = 0
    round: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "provider": self.provider,
            "status": self.status,
            "requests": self.requests,
            "completed": self.completed,
            "failed": self.failed,
        }
