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
(``expired``, a ``failed`` batch) are resubmitted in the next round, at most
``MAX_RESUBMITS`` times; error lines follow the online rules (``retry_on`` statuses are
retried in a later round up to ``retries``, others fail their row with their class). A
batch the user cancelled is not resubmitted: the session that finds it cancelled fails
its unrun requests as ``cancelled`` (a later rerun, the user's choice, submits them). A
batch whose output file is gone at the provider is reported once and its requests are
submitted again (paid again, the warning says). Output lines are read as a stream, each
bounded by ``max_response_mb``.

Every error message the collector records goes through ``_fail`` or ``_break``, which
scrub the provider's secrets: no branch can forget it. Any failure of the collector
itself (a spool or journal file it cannot write, a bug) is ``_break``: every waiting call
and the run fail with one message naming the file and the error; nothing waits forever.

Kept whole (~640 lines): submitting, following and ending are steps of one state machine
over the same waiting calls, spools and batches (``_pending``, ``_attached``, ``_queue``),
and ``_fail``/``_break`` are its one exit for errors; split across modules, every step
would reach into the others' state.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from genwire.config.schema import BatchConfig
from genwire.errors import BatchModeFailed, ErrorClass, ModelError, exception_text
from genwire.providers.batch.control import BatchHost, control_request, find_batches
from genwire.providers.batch.format import (
    NOT_RUN,
    TERMINAL,
    BatchInfo,
    ResultLine,
    bounded_lines,
    custom_id_in,
    parse_result,
    request_id,
    request_line,
)
from genwire.providers.batch.ledger import Ledger

__all__ = ["SPOOL_PREFIX", "BatchCollector"]

log = logging.getLogger("genwire.batch")

SETTLE_MIN_S = 0.5  # without the count: a round waits this long after the last call
SETTLE_MAX_S = 5.0
MAX_RESUBMITS = 3  # a request no batch ran (expired, cancelled) this many times fails
OCCURRENCES_KEPT = 65_536  # recent request ids counted for re-asks; more rows than a window
USER_CANCELLED = "user_cancelled"  # a line of a batch the user cancelled, as this session found it
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
        self._max_line = int(host.config.max_response_mb * 1024 * 1024)  # one output line
        self.round = 0  # rounds submitted by this session
        self.infos: dict[str, BatchInfo] = {}  # every batch this session submitted or attached to
        self.failure: BatchModeFailed | None = None  # the collector broke: the run stops with this
        self._queue: dict[tuple[str, str], _Spool] = {}  # (path, model) -> the spool being built
        self._arrivals = 0
        self._wake: asyncio.Event | None = None
        self._pump: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: set[_Waiter] = set()  # every call not answered yet
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
        if self.failure is not None:
            raise self.failure
        waiter = _Waiter(custom_id, alias, path, body, asyncio.get_running_loop().create_future())
        self.waiting += 1
        self._pending.add(waiter)
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

    def _resolve(self, waiter: _Waiter, result: tuple[Any, int] | None, error: Exception | None = None) -> None:
        """Answer a call; it stops counting as waiting now (not when its callbacks run)."""
        self._pending.discard(waiter)
        if waiter.future.done():
            return
        self.waiting -= 1
        if error is not None:
            waiter.future.set_exception(error)
        else:
            waiter.future.set_result(result)  # type: ignore[arg-type]

    def _fail(self, waiter: _Waiter, error_class: ErrorClass, message: str) -> None:
        """The one place a call's failure is recorded (its row's errors-file line, the
        log, the summary): scrubbed here, whatever branch said it."""
        message = self._host._scrub(message)
        error = ModelError(error_class, message, target=waiter.alias, attempts=max(waiter.submissions, 1))
        self._resolve(waiter, None, error)

    def _break(self, exc: BaseException) -> None:
        """The collector cannot go on: every waiting call fails with one message naming
        the file and the error, and so does the run (``failure``)."""
        if self.failure is None:
            if isinstance(exc, OSError) and exc.filename:
                what = f"cannot write {exc.filename}: {exc.strerror or exc}"
            else:
                what = exception_text(exc)
            self.failure = BatchModeFailed(
                self._host._scrub(
                    f"batch mode stopped (provider {self.name}): {what}; the checkpoint and its journal of "
                    "batches are kept: fix the cause and rerun the same command (nothing paid for is asked again)"
                )
            )
        for spool in self._queue.values():
            _close_quietly(spool.handle)
            spool.path.unlink(missing_ok=True)
        self._queue.clear()
        for waiter in list(self._pending):
            self._resolve(waiter, None, self.failure)

    def _enqueue(self, waiter: _Waiter) -> None:
        if self.failure is not None:
            self._resolve(waiter, None, self.failure)
            return
        key = (waiter.path, str(waiter.body.get("model")))
        line = request_line(waiter.custom_id, waiter.path, waiter.body)
        spool = self._queue.get(key)
        if spool is not None and (
            spool.count + 1 > self.config.max_requests or spool.size + len(line) > self._max_bytes
        ):
            self._seal(key, self.round + 1)  # a split: this file is full, submit it now
            spool = None
            if self.failure is not None:
                self._resolve(waiter, None, self.failure)
                return
        path = spool.path if spool is not None else self._spool_path(".jsonl")
        try:
            if spool is None:
                spool = self._queue[key] = _Spool(path, "/v1" + waiter.path, path.open("wb"))
            spool.handle.write(line)
        except OSError as exc:  # a full disk, say: the run stops, naming the file
            self._break(OSError(exc.errno, exc.strerror or str(exc), str(path)))
            self._resolve(waiter, None, self.failure)
            return
        spool.count += 1
        spool.size += len(line)
        spool.waiters.append(waiter)
        self._arrivals += 1
        if self._round_if_all_waiting():
            return
        if self._wake is None:
            self._wake = asyncio.Event()
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._guarded(self._rounds()))
        self._wake.set()

    def _spool_path(self, suffix: str) -> Path:
        # Named per provider: two collectors in one process (two batching providers, or a
        # pool's endpoints) would otherwise overwrite each other's files.
        return self._spool_dir / f"{SPOOL_PREFIX}{self.name}-{os.getpid()}-{next(self._serial)}{suffix}"

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
        spool = self._queue.pop(key, None)
        if spool is None:  # dropped by _break while a round was being sealed
            return
        try:
            spool.handle.close()  # the buffered rest is written now: a full disk shows here
        except OSError as exc:
            self._queue[key] = spool  # failed by _break with the rest
            self._break(OSError(exc.errno, exc.strerror or str(exc), str(spool.path)))
            return
        self._spawn(self._submit(spool, round_number))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(self._guarded(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guarded(self, coro: Any) -> None:
        """A task of the collector: whatever it raises breaks the collector (and the run)
        instead of dying unseen while calls wait on it."""
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._break(exc)

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
                    "metadata": {"made_by": "genwire", "genwire_journal": self._ledger.tag},
                },
            )
            batch_id = created.get("id") if isinstance(created, dict) else None
            if not isinstance(batch_id, str):
                raise ModelError(ErrorClass.BAD_RESPONSE, "batch mode: POST /batches answered without a batch id")
            self._ledger.submitted(self.name, batch_id, file_id)  # before the run waits on it
        except ModelError as exc:  # the provider refused: those calls fail (anything else breaks the run)
            for waiter in spool.waiters:
                self._fail(waiter, exc.error_class, exc.message)
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
        except ModelError as exc:
            self._following.discard(batch_id)
            for waiter in self._attached.pop(batch_id, {}).values():
                self._fail(waiter, exc.error_class, f"{exc.message} (following batch {batch_id})")
            return
        # A cancelled batch is the user's (genwire never cancels its own): the session that
        # finds it fails its unrun calls; a later rerun, the user's choice, submits them.
        user_cancelled = status == "cancelled" and not self._ledger.has_ended(self.name, batch_id)
        why = _batch_errors(batch) or f"the batch ended {status}"
        # All of the batch's lines at once, then one look at the round: calls sent back
        # (retries, lines never run) go out together, not one round each.
        self._distributing = True
        try:
            gone: list[str] = []
            for key in ("output_file_id", "error_file_id"):
                file_id = batch.get(key)
                if not isinstance(file_id, str):
                    continue
                try:
                    await self._read_results(batch_id, file_id, user_cancelled)
                except ModelError as exc:
                    if exc.error_class is not ErrorClass.NOT_FOUND:
                        for waiter in self._attached.pop(batch_id, {}).values():
                            self._fail(waiter, exc.error_class, f"{exc.message} (reading batch {batch_id})")
                        return  # not recorded as ended: a rerun reads it again
                    gone.append(file_id)
            self._ledger.ended(self.name, batch_id, status, gone=bool(gone))
            self._finished.add(batch_id)
            waiters = self._attached.pop(batch_id, {})
            if gone and waiters:
                log.warning(
                    "batch %s (provider %s) ended %s but its result file %s is gone at the provider (deleted, or past "
                    "its retention): its %d unanswered requests are submitted again and will be paid again",
                    batch_id,
                    self.name,
                    status,
                    ", ".join(gone),
                    len(waiters),
                )
                for waiter in waiters.values():
                    waiter.earlier = False
                    self._enqueue(waiter)
                return
            for waiter in waiters.values():
                code = "batch_" + status
                self._settle(waiter, ResultLine(waiter.custom_id, None, None, code, why), user_cancelled)
        finally:
            self._following.discard(batch_id)
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

    async def _download(self, file_id: str) -> Path:
        """A file's content, streamed to a spool file on disk (the caller removes it)."""
        path = self._spool_path(".out.jsonl")
        try:
            await self._call("GET", f"/files/{file_id}/content", sink=path)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path

    async def _read_results(self, batch_id: str, file_id: str, user_cancelled: bool) -> None:
        """Settle the calls of a result file's lines, read as a stream, each line bounded
        by ``max_response_mb`` (a longer one fails its call, as an online answer would)."""
        path = await self._download(file_id)
        waiters = self._attached.get(batch_id, {})
        try:
            with path.open("rb") as handle:
                for raw, whole in bounded_lines(handle, self._max_line):
                    line = (parse_result(raw) if raw.strip() else None) if whole else self._too_long(custom_id_in(raw))
                    if line is None:
                        continue
                    if user_cancelled and line.error_code == "batch_cancelled":
                        line = replace(line, error_code=USER_CANCELLED)  # also for calls not made yet
                    found = waiters.pop(line.custom_id, None)
                    if found is None:
                        self._leftovers[line.custom_id] = line  # its row has not asked yet
                    else:
                        self._settle(found, line, user_cancelled)
        finally:
            path.unlink(missing_ok=True)

    def _too_long(self, custom_id: str | None) -> ResultLine | None:
        if custom_id is None:
            return None  # no call to name: its call is treated as never run
        message = (
            f"batch mode: a batch output line larger than {self._host.config.max_response_mb:g} MB (max_response_mb); "
            "raise the provider's max_response_mb if such an answer is legitimate"
        )
        return ResultLine(custom_id, None, None, "too_large", message)

    def _settle(self, waiter: _Waiter, line: ResultLine, user_cancelled: bool = False) -> None:
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
        if line.error_code == USER_CANCELLED or (user_cancelled and line.error_code == "batch_cancelled"):
            self._fail(
                waiter,
                ErrorClass.CANCELLED,
                "batch mode: the batch holding this request was cancelled (genwire batches cancel, or at the "
                "provider) before it ran; it is not submitted again by this run: rerun to submit it",
            )
            return
        if line.error_code == "too_large":
            self._fail(waiter, ErrorClass.BAD_RESPONSE, line.error_message)
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
        self._fail(waiter, ErrorClass.BAD_RESPONSE, f"batch mode: {line.error_code}: {line.error_message}")

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
        """Batches an earlier session created but did not record (killed before the
        journal's line, or the line was damaged): found among the provider's batches by
        their input file (and, for a damaged journal, by the journal's tag in their
        metadata), their request ids read from that file, and recorded now."""
        ledger = self._ledger
        files = ledger.unbatched_files(self.name)
        lost = ledger.lost(self.name)
        if files or lost:
            async for batch in find_batches(self._host, ledger.tag if lost else None, set(files)):
                batch_id, file_id = batch["id"], batch["input_file_id"]
                if file_id in files:
                    ids = files.pop(file_id)
                    if ids is None:
                        ledger.found(self.name, batch_id, file_id, await self._input_ids(file_id, batch_id))
                    else:
                        ledger.submitted(self.name, batch_id, file_id)
                elif not ledger.known(self.name, batch_id):
                    ledger.found(self.name, batch_id, file_id, await self._input_ids(file_id, batch_id))
            ledger.searched(self.name)
        for file_id, batch_id in ledger.idless_files(self.name).items():
            ledger.found(self.name, batch_id, file_id, await self._input_ids(file_id, batch_id))

    async def _input_ids(self, file_id: str, batch_id: str) -> list[str]:
        """The request ids of a batch's input file, read from the provider (a damaged
        journal lost them). A file gone there is a warning: its requests are asked again."""
        try:
            path = await self._download(file_id)
        except ModelError as exc:
            log.warning(
                "batch %s: its input file %s cannot be read at the provider (%s); the requests it held are "
                "submitted again when asked, and paid again",
                batch_id,
                file_id,
                exc.message,
            )
            return []
        ids: list[str] = []
        try:
            with path.open("rb") as handle:
                for raw, whole in bounded_lines(handle, self._max_bytes):
                    found = _custom_id(raw) if whole else custom_id_in(raw)
                    if found is not None:
                        ids.append(found)
        finally:
            path.unlink(missing_ok=True)
        return ids

    async def aclose(self) -> None:
        """Stop waiting (the provider's batches keep running: a rerun collects them)."""
        tasks = [t for t in [self._pump, *self._tasks] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for spool in self._queue.values():
            _close_quietly(spool.handle)
            spool.path.unlink(missing_ok=True)
        self._queue.clear()


def _close_quietly(handle: Any) -> None:
    with contextlib.suppress(OSError):  # a spool that cannot be written is removed anyway
        handle.close()


def _custom_id(raw: bytes) -> str | None:
    try:
        record = json.loads(raw)
    except ValueError:
        return custom_id_in(raw[:4096])
    value = record.get("custom_id") if isinstance(record, dict) else None
    return value if isinstance(value, str) else None


def _int(value: Any, default: int) -> int:
    return value if type(value) is int else default


def _batch_errors(batch: dict[str, Any]) -> str:
    errors = batch.get("errors")
    data = errors.get("data") if isinstance(errors, dict) else None
    if isinstance(data, list):
        messages = [str(e.get("message")) for e in data if isinstance(e, dict) and e.get("message")]
        return "; ".join(messages[:3])
    return ""
