"""``BatchCollector``: one provider's model calls gathered into Batch API files.

A call (``ask``) writes its request line to a spool file on disk and waits. A round is
submitted when every live row is waiting on a model call: the engine says how many rows
it has live (``RoundSignal.live_rows``) and the collectors of the run count their waiting
calls; the call that makes them equal submits the round at once, in every collector.
Where that count cannot tell (one call for several rows, a row waiting on an online
provider, a row that ended without a call), the round goes when the calls settle: no new
call for ``settle_s``. A spool that reaches ``max_requests`` or ``max_file_mb`` is submitted at once
(a split). Each spool is uploaded (``POST /files``, streamed from disk), recorded in the
ledger, made a batch (``POST /batches``), recorded again, then polled until it ends; its
output and error files are streamed to disk and each line resolves its call.

A call whose id the ledger knows (an earlier session submitted it) is attached to that
batch instead: nothing is uploaded or created for it again. Lines a batch never ran
(``expired``, ``cancelled``, a ``failed`` batch) are resubmitted in the next round, at most
``MAX_RESUBMITS`` times; error lines follow the online rules (``retry_on`` statuses are
retried in a later round up to ``retries``, others fail their row with their class).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from genwire.config.schema import BatchConfig, OpenAIProviderConfig
from genwire.errors import ErrorClass, ModelError, exception_text
from genwire.providers.batch.format import (
    NOT_RUN,
    TERMINAL,
    BatchInfo,
    ResultLine,
    parse_result,
    request_id,
    request_line,
)
from genwire.providers.batch.ledger import Ledger
from genwire.providers.failures import MAX_RETRY_WAIT_S, AttemptFailure
from genwire.providers.usage import ModelUsage

__all__ = ["SPOOL_PREFIX", "BatchCollector", "check_batch_api", "control_request"]

SETTLE_MIN_S = 0.5  # without the count: a round waits this long after the last call
SETTLE_MAX_S = 5.0
MAX_RESUBMITS = 3  # a request no batch ran (expired, cancelled) this many times fails
OCCURRENCES_KEPT = 65_536  # recent request ids counted for re-asks; more rows than a window
LIST_PAGES = 20  # of 100 batches, searched for a batch an earlier session created unrecorded
SPOOL_PREFIX = "batch-spool-"  # files in the checkpoint directory while being built or read


class RoundSignal:
    """Shared by the collectors of one run: the engine's live rows against the calls
    waiting in all of them."""

    def __init__(self, live_rows: Callable[[], int]) -> None:
        self.live_rows = live_rows
        self.collectors: list[BatchCollector] = []

    def all_waiting(self) -> bool:
        live = self.live_rows()
        return live > 0 and sum(c.waiting for c in self.collectors) >= live

    def submit_round(self) -> None:
        for collector in self.collectors:
            collector.submit_round()


class BatchHost(Protocol):
    """What a collector uses of its provider (``OpenAIProvider``)."""

    name: str
    base_url: str
    config: OpenAIProviderConfig

    async def _ensure_session(self) -> Any: ...

    def _usage(self, alias: str) -> ModelUsage: ...

    def failure_of(self, url: str, status: int, raw: bytes) -> tuple[ErrorClass, str, bool]: ...

    async def _read_body(self, resp: Any, url: str) -> bytes: ...

    def _where(self, url: str) -> str: ...

    def _scrub(self, text: str) -> str: ...


@dataclass(eq=False)
class _Waiter:
    custom_id: str
    alias: str
    path: str
    body: dict[str, Any]
    future: asyncio.Future[tuple[Any, int]]
    submissions: int = 0  # batches it was sent in (its "attempts")
    retries: int = 0  # error lines retried
    resubmits: int = 0  # batches that never ran it
    earlier: bool = False  # attached to a batch an earlier session submitted


@dataclass(eq=False)
class _Spool:
    path: Path
    endpoint: str
    handle: Any
    count: int = 0
    size: int = 0
    waiters: list[_Waiter] = field(default_factory=list)


class BatchCollector:
    def __init__(
        self, host: BatchHost, config: BatchConfig, ledger: Ledger, spool_dir: Path, signal: RoundSignal | None = None
    ) -> None:
        self._host = host
        self._signal = signal
        if signal is not None:
            signal.collectors.append(self)
        self.waiting = 0  # calls not yet answered
        self._distributing = False
        self.name = host.name
        self.config = config
        self._ledger = ledger
        self._spool_dir = spool_dir
        self._settle_s = min(max(SETTLE_MIN_S, config.poll_interval_s / 10), SETTLE_MAX_S)
        self._max_bytes = int(config.max_file_mb * 1024 * 1024)
        self.round = 0  # rounds submitted by this session
        self.infos: dict[str, BatchInfo] = {}  # every batch this session submitted or attached to
        self._queue: dict[tuple[str, str], _Spool] = {}  # (path, model) -> the spool being built
        self._arrivals = 0
        self._wake: asyncio.Event | None = None
        self._pump: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._attached: dict[str, dict[str, _Waiter]] = {}  # batch -> its waiting calls
        self._following: set[str] = set()
        self._finished: set[str] = set()
        self._leftovers: dict[str, ResultLine] = {}  # results read before their call came
        self._occurrences: OrderedDict[str, int] = OrderedDict()
        self._serial = itertools.count(1)

    # --- the calls ---------------------------------------------------------------------

    def request_id(self, base: str) -> str:
        """The next ``custom_id`` of a request whose identity is ``base``."""
        seen = self._occurrences.pop(base, 0)
        self._occurrences[base] = seen + 1
        if len(self._occurrences) > OCCURRENCES_KEPT:
            self._occurrences.popitem(last=False)
        return request_id(base, seen)

    async def ask(self, alias: str, path: str, body: dict[str, Any], custom_id: str) -> tuple[Any, int]:
        """The response body of ``body`` sent through a batch, and the batches it took."""
        waiter = _Waiter(custom_id, alias, path, body, asyncio.get_running_loop().create_future())
        self.waiting += 1
        waiter.future.add_done_callback(self._answered)
        left = self._leftovers.pop(custom_id, None)
        batch = self._ledger.batch_of(self.name, custom_id) if left is None else None
        if left is not None:  # read from a batch an earlier session submitted
            waiter.submissions, waiter.earlier = 1, True
            self._settle(waiter, left)
        elif batch is not None and batch not in self._finished:
            waiter.submissions, waiter.earlier = 1, True
            self._attached.setdefault(batch, {})[custom_id] = waiter
            self._follow(batch)
        else:
            self._enqueue(waiter)
        return await waiter.future

    def _round_if_all_waiting(self) -> bool:
        """Submit the round now if every live row waits on a model (not while a batch's
        lines are being handed out: they may send more calls back)."""
        if self._distributing or self._signal is None or not self._queue or not self._signal.all_waiting():
            return False
        self._signal.submit_round()
        return True

    def _answered(self, future: asyncio.Future[tuple[Any, int]]) -> None:
        if future.cancelled():  # its row was cancelled; answered calls were counted in _resolve
            self.waiting -= 1

    def _resolve(self, waiter: _Waiter, result: tuple[Any, int] | None, error: ModelError | None = None) -> None:
        """Answer a call; it stops counting as waiting now (not when its callbacks run)."""
        if waiter.future.done():
            return
        self.waiting -= 1
        if error is not None:
            waiter.future.set_exception(error)
        else:
            waiter.future.set_result(result)  # type: ignore[arg-type]

    def _fail(self, waiter: _Waiter, error_class: ErrorClass, message: str) -> None:
        error = ModelError(error_class, message, target=waiter.alias, attempts=max(waiter.submissions, 1))
        self._resolve(waiter, None, error)

    def _enqueue(self, waiter: _Waiter) -> None:
        key = (waiter.path, str(waiter.body.get("model")))
        line = request_line(waiter.custom_id, waiter.path, waiter.body)
        spool = self._queue.get(key)
        if spool is not None and (
            spool.count + 1 > self.config.max_requests or spool.size + len(line) > self._max_bytes
        ):
            self._seal(key, self.round + 1)  # a split: this file is full, submit it now
            spool = None
        if spool is None:
            path = self._spool_dir / f"{SPOOL_PREFIX}{self.name}-{os.getpid()}-{next(self._serial)}.jsonl"
            spool = self._queue[key] = _Spool(path, "/v1" + waiter.path, path.open("wb"))
        spool.handle.write(line)
        spool.count += 1
        spool.size += len(line)
        spool.waiters.append(waiter)
        self._arrivals += 1
        if self._round_if_all_waiting():
            return
        if self._wake is None:
            self._wake = asyncio.Event()
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._rounds())
        self._wake.set()

    async def _rounds(self) -> None:
        """Submit a round whenever the calls settle (see the module docstring)."""
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                seen = self._arrivals
                await asyncio.sleep(self._settle_s)
                if self._arrivals == seen:
                    break
            if self._signal is not None:
                self._signal.submit_round()
            else:
                self.submit_round()

    def submit_round(self) -> None:
        """Submit every spool being built: one round."""
        if self._queue:
            self.round += 1
            for key in list(self._queue):
                self._seal(key, self.round)

    def _seal(self, key: tuple[str, str], round_number: int) -> None:
        spool = self._queue.pop(key)
        spool.handle.close()
        self._spawn(self._submit(spool, round_number))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- submitting ----------------------------------------------------------------------

    async def _submit(self, spool: _Spool, round_number: int) -> None:
        ids = [w.custom_id for w in spool.waiters]
        try:
            file_id = await self._upload(spool.path)
            self._ledger.uploaded(self.name, file_id, ids)  # before the batch exists
            created = await self._json(
                "POST",
                "/batches",
                {
                    "input_file_id": file_id,
                    "endpoint": spool.endpoint,
                    "completion_window": self.config.completion_window,
                    "metadata": {"made_by": "genwire"},
                },
            )
            batch_id = created.get("id") if isinstance(created, dict) else None
            if not isinstance(batch_id, str):
                raise ModelError(ErrorClass.BAD_RESPONSE, "batch mode: POST /batches answered without a batch id")
            self._ledger.submitted(self.name, batch_id, file_id)  # before the run waits on it
        except Exception as exc:
            error_class, message = _error_of(exc)
            for waiter in spool.waiters:
                self._fail(waiter, error_class, message)
            return
        finally:
            spool.path.unlink(missing_ok=True)
        for waiter in spool.waiters:
            waiter.submissions += 1
            self._host._usage(waiter.alias).batched += 1
        self.infos[batch_id] = BatchInfo(batch_id, self.name, str(created.get("status", "validating")), len(ids))
        self.infos[batch_id].round = round_number
        self._attached.setdefault(batch_id, {}).update((w.custom_id, w) for w in spool.waiters)
        self._follow(batch_id)

    async def _upload(self, path: Path) -> str:
        answer = await self._call("POST", "/files", upload=path)
        try:
            file_id = json.loads(answer)["id"]
        except (ValueError, KeyError, TypeError):
            file_id = None
        if not isinstance(file_id, str):
            raise ModelError(ErrorClass.BAD_RESPONSE, "batch mode: POST /files answered without a file id")
        return file_id

    # --- following -----------------------------------------------------------------------

    def _follow(self, batch_id: str) -> None:
        if batch_id not in self._following:
            self._following.add(batch_id)
            self.infos.setdefault(batch_id, BatchInfo(batch_id, self.name, "attached", 0))
            self._spawn(self._watch(batch_id))

    async def _watch(self, batch_id: str) -> None:
        try:
            while True:
                batch = await self._json("GET", f"/batches/{batch_id}")
                status = self._note(batch_id, batch)
                if status in TERMINAL:
                    break
                await asyncio.sleep(self.config.poll_interval_s)
            lines: list[ResultLine] = []
            for key in ("output_file_id", "error_file_id"):
                file_id = batch.get(key)
                if isinstance(file_id, str):
                    lines += await self._results(file_id)
        except Exception as exc:
            error_class, message = _error_of(exc)
            for waiter in self._attached.pop(batch_id, {}).values():
                self._fail(waiter, error_class, f"{message} (following batch {batch_id})")
            return
        finally:
            self._following.discard(batch_id)
        self._finished.add(batch_id)
        self._ledger.ended(self.name, batch_id, status)
        why = _batch_errors(batch) or f"the batch ended {status}"
        # All of the batch's lines at once, then one look at the round: calls sent back
        # (retries, lines never run) go out together, not one round each.
        self._distributing = True
        try:
            waiters: dict[str, _Waiter] = self._attached.pop(batch_id, {})
            for line in lines:
                found = waiters.pop(line.custom_id, None)
                if found is None:
                    self._leftovers[line.custom_id] = line  # its row has not asked yet
                else:
                    self._settle(found, line)
            for waiter in waiters.values():
                self._settle(waiter, ResultLine(waiter.custom_id, None, None, "batch_" + status, why))
        finally:
            self._distributing = False
        self._round_if_all_waiting()

    def _note(self, batch_id: str, batch: Any) -> str:
        if not isinstance(batch, dict):
            raise ModelError(ErrorClass.BAD_RESPONSE, f"batch mode: GET /batches/{batch_id} is not a JSON object")
        status = str(batch.get("status", ""))
        info = self.infos.setdefault(batch_id, BatchInfo(batch_id, self.name, status, 0))
        info.status = status
        counts = batch.get("request_counts")
        if isinstance(counts, dict):
            info.requests = _int(counts.get("total"), info.requests)
            info.completed = _int(counts.get("completed"), info.completed)
            info.failed = _int(counts.get("failed"), info.failed)
        return status

    async def _results(self, file_id: str) -> list[ResultLine]:
        """The result lines of a file, streamed through disk (parsed lines stay: they
        are this batch's, whose calls are in memory anyway)."""
        path = self._spool_dir / f"{SPOOL_PREFIX}{self.name}-{os.getpid()}-{next(self._serial)}.out.jsonl"
        try:
            await self._call("GET", f"/files/{file_id}/content", sink=path)
            with path.open("rb") as handle:
                return [line for raw in handle if raw.strip() and (line := parse_result(raw)) is not None]
        finally:
            path.unlink(missing_ok=True)

    def _settle(self, waiter: _Waiter, line: ResultLine) -> None:
        usage = self._host._usage(waiter.alias)
        if line.status is not None and 200 <= line.status < 300:
            usage.count_tokens(line.body)
            self._resolve(waiter, (line.body, waiter.submissions))
            return
        if line.status is not None and waiter.earlier:
            # An error an earlier session already counted (its row failed): a rerun asks
            # again, as an online rerun would.
            waiter.earlier = False
            self._enqueue(waiter)
            return
        if line.status is not None:
            raw = json.dumps(line.body).encode() if not isinstance(line.body, str) else line.body.encode()
            if line.status == 429:
                usage.rate_limited += 1
            error_class, message, retry = self._host.failure_of(self._host.base_url + waiter.path, line.status, raw)
            if retry and waiter.retries < self._host.config.retries:
                waiter.retries += 1
                usage.retries += 1
                self._enqueue(waiter)
                return
            self._fail(waiter, error_class, f"{message} (a batch line)")
            return
        if line.error_code in NOT_RUN or (line.error_code or "").startswith("batch_"):
            if waiter.resubmits < MAX_RESUBMITS:
                waiter.resubmits += 1
                self._enqueue(waiter)
                return
            self._fail(
                waiter,
                ErrorClass.TIMEOUT,
                f"batch mode: no batch ran this request in {waiter.resubmits + 1} tries ({line.error_message})",
            )
            return
        detail = self._host._scrub(line.error_message)
        self._fail(waiter, ErrorClass.BAD_RESPONSE, f"batch mode: {line.error_code}: {detail}")

    # --- HTTP ----------------------------------------------------------------------------

    async def _json(self, method: str, path: str, body: Any = None) -> Any:
        raw = await self._call(method, path, body=body)
        try:
            return json.loads(raw)
        except ValueError:
            raise ModelError(
                ErrorClass.BAD_RESPONSE, f"batch mode: {method} {path} answered with a body that is not JSON"
            ) from None

    async def _call(
        self, method: str, path: str, *, body: Any = None, upload: Path | None = None, sink: Path | None = None
    ) -> bytes:
        return await control_request(self._host, method, path, body=body, upload=upload, sink=sink)

    # --- ending --------------------------------------------------------------------------

    def open_batches(self) -> list[BatchInfo]:
        return [i for i in self.infos.values() if i.status not in TERMINAL]

    def batches(self) -> Iterator[BatchInfo]:
        return iter(self.infos.values())

    async def recover(self) -> None:
        """Batches an earlier session created but was killed before recording: found by
        their input file among the provider's batches, and recorded now."""
        files = self._ledger.unbatched_files(self.name)
        after: str | None = None
        for _ in range(LIST_PAGES if files else 0):
            page = await self._json("GET", "/batches?limit=100" + (f"&after={after}" if after else ""))
            data = page.get("data") if isinstance(page, dict) else None
            if not isinstance(data, list) or not data:
                return
            for batch in data:
                file_id = batch.get("input_file_id") if isinstance(batch, dict) else None
                if file_id in files and isinstance(batch.get("id"), str):
                    self._ledger.submitted(self.name, batch["id"], file_id)
                    del files[file_id]
            if not files or not page.get("has_more"):
                return
            after = data[-1].get("id")

    async def aclose(self) -> None:
        """Stop waiting (the provider's batches keep running: a rerun collects them)."""
        tasks = [t for t in [self._pump, *self._tasks] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for spool in self._queue.values():
            spool.handle.close()
            spool.path.unlink(missing_ok=True)
        self._queue.clear()


async def control_request(
    host: BatchHost,
    method: str,
    path: str,
    *,
    body: Any = None,
    upload: Path | None = None,
    sink: Path | None = None,
) -> bytes:
    """One control request of the Files/Batches API, retried like a model request
    (transient failures, up to ``retries``); an error raises ``ModelError``."""
    import aiohttp

    url = host.base_url + path
    cfg = host.config
    tries = 0
    while True:
        tries += 1
        session = await host._ensure_session()
        kwargs: dict[str, Any] = {"timeout": aiohttp.ClientTimeout(total=None, sock_read=cfg.timeout_s)}
        handle = upload.open("rb") if upload is not None else None
        if handle is not None:  # multipart, streamed from the spool file
            form = aiohttp.FormData()
            form.add_field("purpose", "batch")
            form.add_field("file", handle, filename="requests.jsonl", content_type="application/jsonl")
            payload = form()
            # Our own header: the session's default Content-Type is application/json.
            kwargs.update(data=payload, headers={"Content-Type": payload.content_type})
        elif body is not None:
            kwargs["data"] = json.dumps(body, separators=(",", ":")).encode()
        retry = False
        try:
            async with session.request(method, url, **kwargs) as resp:
                status = resp.status
                if 200 <= status < 300 and sink is not None:
                    with sink.open("wb") as out:
                        async for chunk in resp.content.iter_chunked(1 << 20):
                            out.write(chunk)
                    return b""
                raw = await host._read_body(resp, url)  # bounded by max_response_mb, as model answers
            if 200 <= status < 300:
                return raw
            error_class, message, retry = host.failure_of(url, status, raw)
            message = message.replace("from POST", f"from {method}", 1)
        except AttemptFailure as failure:  # a body past max_response_mb
            error_class, retry = failure.error_class, failure.retry
            message = failure.message.replace("from POST", f"from {method}", 1)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            error_class = ErrorClass.TIMEOUT if isinstance(exc, TimeoutError) else ErrorClass.UNREACHABLE
            message, retry = f"{method} {host._where(url)} failed: {exception_text(exc)}", True
        finally:
            if handle is not None:
                handle.close()
        if retry and tries <= cfg.retries:
            await asyncio.sleep(min(cfg.backoff_s * 2 ** (tries - 1), MAX_RETRY_WAIT_S))
            continue
        raise ModelError(error_class, host._scrub(f"batch mode: {message}"), attempts=tries)


async def check_batch_api(host: BatchHost) -> None:
    """The pre-flight's check of batch mode: the Files and Batches endpoints answer a
    listing call with this key (raises ``ModelError``, nothing is uploaded)."""
    await control_request(host, "GET", "/files?purpose=batch&limit=1")
    await control_request(host, "GET", "/batches?limit=1")


def _error_of(exc: Exception) -> tuple[ErrorClass, str]:
    if isinstance(exc, ModelError):
        return exc.error_class, exc.message
    return ErrorClass.BAD_RESPONSE, f"batch mode: {exception_text(exc)}"


def _int(value: Any, default: int) -> int:
    return value if type(value) is int else default


def _batch_errors(batch: dict[str, Any]) -> str:
    errors = batch.get("errors")
    data = errors.get("data") if isinstance(errors, dict) else None
    if isinstance(data, list):
        messages = [str(e.get("message")) for e in data if isinstance(e, dict) and e.get("message")]
        return "; ".join(messages[:3])
    return ""
