"""The fake server's Files and Batches API (OpenAI Batch format), mounted by
``FakeOpenAIServer``: ``server.batches`` scripts it and counts what it was sent.

Each line of a batch is answered by the same logic as an online request (scripts,
``fail_when``, structured output, vectors), so a batch run's output equals the online
run's, but it is not counted in ``server.requests``: ``batches.lines`` counts it.

Modes: complete at once (default), after ``delay_s``, only when released (``hold``, or
``hold_from`` for the batches after the first few), with the next batches ``expired``
after a fraction of their lines (``expire_next``) or ``failed`` before any
(``fail_next``), the next output line padded past a size (``oversize_next``), result
files deleted (``delete_outputs``: gone, as after the provider's retention); and
``enabled = False`` answers 404 on every endpoint (a provider without batches).
``answered`` counts the lines run per ``custom_id`` (a request paid twice shows as 2)::

    server.batches.hold()            # new batches stay in_progress...
    server.batches.release()         # ...until now
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["FakeBatches"]

# (endpoint "chat" | "embeddings", model, body, request headers) -> (status, body bytes)
Answer = Callable[[str, str, dict[str, Any], Mapping[str, str]], Awaitable[tuple[int, bytes]]]

_ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/embeddings": "embeddings"}
_OPEN = ("validating", "in_progress", "finalizing", "cancelling")


@dataclass
class _File:
    id: str
    purpose: str
    filename: str
    content: bytes
    created_at: int

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.content),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
        }


@dataclass
class _Batch:
    id: str
    endpoint: str
    input_file_id: str
    completion_window: str
    headers: dict[str, str]
    created: float
    held: bool
    expire_fraction: float | None
    metadata: dict[str, Any] | None
    failure: str | None = None  # scripted: ends failed with this message
    expiry_message: str | None = None  # scripted: the error message of its unrun lines
    status: str = "validating"
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: Any = None
    timestamps: dict[str, int] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": self.errors,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": int(self.created),
            **self.timestamps,
            "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed},
            "metadata": self.metadata,
        }


class FakeBatches:
    """Scriptable Files + Batches API; configuration is thread-safe, counters readable."""

    def __init__(self, answer: Answer, api_key: Callable[[], str | None]) -> None:
        self._answer = answer
        self._server_key = api_key
        self._own_key: str | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.enabled = True
        self.delay_s = 0.0
        self._hold = False
        self._expire: list[tuple[float, str | None]] = []
        self._fail: list[str] = []
        self._hold_from: int | None = None
        self._oversize: list[int] = []
        self.files: dict[str, _File] = {}
        self.batches: dict[str, _Batch] = {}
        self.reset_stats()

    # --- configuration -----------------------------------------------------------------

    def hold(self, held: bool = True) -> None:
        """Batches created from now on stay ``in_progress`` until ``release`` (or not)."""
        with self._lock:
            self._hold = held

    def release(self, batch_id: str | None = None) -> None:
        """Let a held batch (or all of them) complete at its next poll."""
        with self._lock:
            for batch in self.batches.values():
                if batch_id is None or batch.id == batch_id:
                    batch.held = False

    def hold_from(self, created: int | None) -> None:
        """Batches created after the first ``created`` (as ``self.created`` counts them)
        stay ``in_progress`` until ``release``; None: stop."""
        with self._lock:
            self._hold_from = created

    def expire_next(self, done_fraction: float, count: int = 1, message: str | None = None) -> None:
        """The next ``count`` batches end ``expired`` with only their first
        ``done_fraction`` of lines answered; the rest go to the error file (with
        ``message`` as each line's error message, if given)."""
        with self._lock:
            self._expire.extend([(done_fraction, message)] * count)

    def oversize_next(self, size: int) -> None:
        """The next answered line gets a padding field making it ``size`` bytes long."""
        with self._lock:
            self._oversize.append(size)

    def delete_outputs(self) -> list[str]:
        """Delete the output and error files of every batch ended so far (the ids)."""
        with self._lock:
            gone = [
                f for b in self.batches.values() for f in (b.output_file_id, b.error_file_id) if f in self.files
            ]
            for file_id in gone:
                del self.files[file_id]
        return [f for f in gone if f is not None]

    def fail_next(self, message: str = "the input file could not be validated", count: int = 1) -> None:
        """The next ``count`` batches end ``failed`` with ``message``, no line run."""
        with self._lock:
            self._fail.extend([message] * count)

    def require_api_key(self, key: str | None) -> None:
        """The Files and Batches endpoints want this key (None: the server's own rule),
        as an account whose key may chat but not batch."""
        with self._lock:
            self._own_key = key

    def _api_key(self) -> str | None:
        with self._lock:
            own = self._own_key
        return own if own is not None else self._server_key()

    def clear(self) -> None:
        """Drop queued expiries and stop holding new batches."""
        with self._lock:
            self._expire.clear()
            self._fail.clear()
            self._oversize.clear()
            self._hold = False
            self._hold_from = None

    def reset_stats(self) -> None:
        with self._lock:
            self.uploads = 0  # files uploaded with purpose batch
            self.created = 0  # batches created
            self.retrievals = 0  # GET /batches/{id}
            self.cancels = 0
            self.listings = 0  # GET /files, GET /batches
            self.lines: dict[str, int] = defaultdict(int)  # requests answered in batches, per model
            self.custom_ids: list[str] = []  # every line submitted, in order
            self.answered: dict[str, int] = defaultdict(int)  # lines run (paid), per custom_id
            self.polls: dict[str, int] = defaultdict(int)  # GET /batches/{id}, per batch

    def open_batches(self) -> list[str]:
        with self._lock:
            return [b.id for b in self.batches.values() if b.status in _OPEN]

    # --- routes --------------------------------------------------------------------------

    def mount(self, app: web.Application) -> None:
        app.router.add_post("/v1/files", self._upload)
        app.router.add_get("/v1/files", self._list_files)
        app.router.add_get("/v1/files/{id}/content", self._content)
        app.router.add_post("/v1/batches", self._create)
        app.router.add_get("/v1/batches", self._list_batches)
        app.router.add_get("/v1/batches/{id}", self._retrieve)
        app.router.add_post("/v1/batches/{id}/cancel", self._cancel)

    def _refused(self, request: web.Request) -> web.Response | None:
        if not self.enabled:
            return _error(404, "Not found: this server has no batch API")
        key = self._api_key()
        if key is not None and request.headers.get("Authorization") != f"Bearer {key}":
            return _error(401, "Incorrect API key provided")
        return None

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids):06d}"

    async def _upload(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        try:
            form = await request.post()
        except ValueError:
            return _error(400, "expected a multipart form")
        purpose, upload = form.get("purpose"), form.get("file")
        if purpose != "batch" or not isinstance(upload, web.FileField):
            return _error(400, "a batch file needs purpose=batch and a file part")
        content = upload.file.read()
        with self._lock:
            item = _File(self._new_id("file"), "batch", upload.filename, content, int(time.time()))
            self.files[item.id] = item
            self.uploads += 1
        return web.json_response(item.public())

    async def _list_files(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        purpose = request.query.get("purpose")
        limit = int(request.query.get("limit", "100"))
        with self._lock:
            self.listings += 1
            data = [f.public() for f in self.files.values() if purpose is None or f.purpose == purpose]
        return web.json_response({"object": "list", "data": data[:limit], "has_more": len(data) > limit})

    async def _content(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        with self._lock:
            item = self.files.get(request.match_info["id"])
        if item is None:
            return _error(404, "No such file")
        return web.Response(body=item.content, content_type="application/octet-stream")

    async def _create(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return _error(400, "request body must be a JSON object")
        endpoint, file_id = body.get("endpoint"), body.get("input_file_id")
        if endpoint not in ("/v1/chat/completions", "/v1/embeddings"):
            return _error(400, f"unsupported endpoint {endpoint!r}")
        with self._lock:
            if file_id not in self.files:
                return _error(404, f"No such file: {file_id}")
            fraction, expiry = self._expire.pop(0) if self._expire else (None, None)
            failure = self._fail.pop(0) if self._fail else None
            held = self._hold or (self._hold_from is not None and self.created >= self._hold_from)
            batch = _Batch(
                self._new_id("batch"),
                endpoint,
                file_id,
                str(body.get("completion_window", "24h")),
                dict(request.headers),
                time.monotonic(),
                held,
                fraction,
                body.get("metadata"),
                failure,
                expiry,
            )
            batch.total = self.files[file_id].content.count(b"\n")
            self.batches[batch.id] = batch
            self.created += 1
        return web.json_response(batch.public())

    async def _list_batches(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        limit = int(request.query.get("limit", "20"))
        after = request.query.get("after")
        with self._lock:
            self.listings += 1
            ordered = sorted(self.batches.values(), key=lambda b: b.id, reverse=True)  # newest first
        if after is not None:
            ordered = [b for b in ordered if b.id < after]
        page = ordered[:limit]
        for batch in page:
            await self._advance(batch)
        data = [b.public() for b in page]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": len(ordered) > limit,
            }
        )

    async def _retrieve(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        with self._lock:
            batch = self.batches.get(request.match_info["id"])
            self.retrievals += 1
            self.polls[request.match_info["id"]] += 1
        if batch is None:
            return _error(404, "No such batch")
        await self._advance(batch)
        return web.json_response(batch.public())

    async def _cancel(self, request: web.Request) -> web.Response:
        if (refused := self._refused(request)) is not None:
            return refused
        with self._lock:
            batch = self.batches.get(request.match_info["id"])
            self.cancels += 1
        if batch is None:
            return _error(404, "No such batch")
        if batch.status in _OPEN:
            await self._finish(batch, "cancelled", done_fraction=0.0)
        return web.json_response(batch.public())

    # --- processing ----------------------------------------------------------------------

    async def _advance(self, batch: _Batch) -> None:
        """Complete (or expire) an open batch whose time has come."""
        if batch.status not in ("validating", "in_progress"):
            return
        with self._lock:
            ready = not batch.held and time.monotonic() - batch.created >= self.delay_s
        if not ready:
            batch.status = "in_progress"
            batch.timestamps.setdefault("in_progress_at", int(time.time()))
            return
        if batch.failure is not None:
            batch.status = "failed"
            batch.errors = {"object": "list", "data": [{"code": "invalid_file", "message": batch.failure}]}
            batch.timestamps["failed_at"] = int(time.time())
        elif batch.expire_fraction is not None:
            await self._finish(batch, "expired", done_fraction=batch.expire_fraction)
        else:
            await self._finish(batch, "completed", done_fraction=1.0)

    async def _finish(self, batch: _Batch, status: str, *, done_fraction: float) -> None:
        batch.status = "finalizing"  # a concurrent poll sees it still open, never half-written
        with self._lock:
            lines = self.files[batch.input_file_id].content.splitlines()
        done = int(len(lines) * done_fraction)
        output: list[bytes] = []
        errors: list[bytes] = []
        problem = None
        for number, raw in enumerate(lines):
            try:
                line = json.loads(raw)
                custom_id, url, body = line["custom_id"], line["url"], line["body"]
                model = body["model"]
            except (ValueError, KeyError, TypeError):
                problem = f"line {number + 1} is not a batch request"
                break
            if url != batch.endpoint or _ENDPOINTS.get(url) is None:
                problem = f"line {number + 1}: url {url!r} is not the batch's endpoint {batch.endpoint!r}"
                break
            with self._lock:
                self.custom_ids.append(custom_id)
            if number >= done:
                code = "batch_expired" if status == "expired" else "batch_cancelled"
                message = batch.expiry_message or f"This request could not be executed before the batch was {status}."
                errors.append(_line(custom_id, None, {"code": code, "message": message}))
                continue
            with self._lock:
                self.lines[model] += 1
                self.answered[custom_id] += 1
                oversize = self._oversize.pop(0) if self._oversize else None
            code_, answer = await self._answer(_ENDPOINTS[url], model, body, batch.headers)
            try:
                decoded = json.loads(answer)
            except ValueError:
                decoded = answer.decode("utf-8", "replace")
            if oversize is not None and isinstance(decoded, dict):
                decoded["padding"] = "x" * oversize
            response = {"status_code": code_, "request_id": f"req-{custom_id}", "body": decoded}
            (output if 200 <= code_ < 300 else errors).append(_line(custom_id, response, None))
        now = int(time.time())
        if problem is not None:
            batch.status, batch.errors = "failed", {"object": "list", "data": [{"code": "invalid", "message": problem}]}
            batch.timestamps["failed_at"] = now
            return
        with self._lock:
            if output:
                item = _File(self._new_id("file"), "batch_output", "output.jsonl", b"".join(output), now)
                self.files[item.id] = item
                batch.output_file_id = item.id
            if errors:
                item = _File(self._new_id("file"), "batch_output", "errors.jsonl", b"".join(errors), now)
                self.files[item.id] = item
                batch.error_file_id = item.id
        batch.completed, batch.failed = len(output), len(errors)
        batch.status = status
        batch.timestamps[f"{status}_at"] = now


def _line(custom_id: str, response: dict[str, Any] | None, error: dict[str, Any] | None) -> bytes:
    record = {"id": f"batch_req_{custom_id}", "custom_id": custom_id, "response": response, "error": error}
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
    return web.json_response(body, status=status)
