"""Batch mode's control calls: the Files and Batches API requests (upload, create, poll,
download, list, cancel) over the provider's session, retried like model requests, their
bodies bounded by ``max_response_mb``. Split from the collector, whose job is gathering
calls into files and resolving them; the CLI (``genwire batches``), the pre-flight's check
and the engine's open-batch query use these alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from genwire.config.schema import OpenAIProviderConfig
from genwire.errors import ErrorClass, ModelError, exception_text
from genwire.providers.failures import MAX_RETRY_WAIT_S, AttemptFailure
from genwire.providers.usage import ModelUsage

__all__ = ["LIST_PAGES", "BatchHost", "check_batch_api", "control_request", "find_batches"]

LIST_PAGES = 20  # of 100 batches, searched for a batch an earlier session created unrecorded


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


async def find_batches(host: BatchHost, tag: str | None, files: set[str]) -> AsyncIterator[dict[str, Any]]:
    """The provider's batches (newest first, up to ``LIST_PAGES`` pages) made from one of
    ``files`` or carrying ``tag`` (a journal's) in their metadata."""
    files = set(files)
    after: str | None = None
    for _ in range(LIST_PAGES):
        raw = await control_request(host, "GET", "/batches?limit=100" + (f"&after={after}" if after else ""))
        try:
            page = json.loads(raw)
        except ValueError:
            raise ModelError(
                ErrorClass.BAD_RESPONSE, "batch mode: GET /batches answered with a body that is not JSON"
            ) from None
        data = page.get("data") if isinstance(page, dict) else None
        if not isinstance(data, list) or not data:
            return
        for batch in data:
            if not isinstance(batch, dict) or not isinstance(batch.get("id"), str):
                continue
            file_id = batch.get("input_file_id")
            metadata = batch.get("metadata")
            tagged = tag is not None and isinstance(metadata, dict) and metadata.get("genwire_journal") == tag
            if isinstance(file_id, str) and (file_id in files or tagged):
                files.discard(file_id)
                yield batch
        if (not files and tag is None) or not page.get("has_more"):
            return
        after = data[-1].get("id") if isinstance(data[-1], dict) else None
        if not isinstance(after, str):
            return


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
                    await _save(resp, sink)
                    return b""
                raw = await host._read_body(resp, url)  # bounded by max_response_mb, as model answers
            if 200 <= status < 300:
                return raw
            error_class, message, retry = host.failure_of(url, status, raw)
            message = message.replace("from POST", f"from {method}", 1)
            if status == 404 and path.startswith("/files/"):  # not a model name: a file the provider dropped
                file_id = path.split("/")[2].split("?")[0]
                message = (
                    f"the file {file_id} is gone at the provider (HTTP 404 from {method} {host._where(url)}): "
                    "deleted, or past the provider's retention of batch files"
                )
        except AttemptFailure as failure:  # a body past max_response_mb
            error_class, retry = failure.error_class, failure.retry
            message = failure.message.replace("from POST", f"from {method}", 1)
        except _LocalWriteError as exc:  # the disk, not the network: the collector breaks
            raise exc.error from None
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


class _LocalWriteError(Exception):
    """Writing a downloaded file to the local disk failed: not a network error."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


async def _save(resp: Any, sink: Path) -> None:
    """A response body streamed to ``sink``; a local write error is ``OSError`` naming it."""
    try:
        out = sink.open("wb")
    except OSError as exc:
        raise _LocalWriteError(OSError(exc.errno, exc.strerror or str(exc), str(sink))) from None
    with out:
        async for chunk in resp.content.iter_chunked(1 << 20):
            try:
                out.write(chunk)
            except OSError as exc:
                raise _LocalWriteError(OSError(exc.errno, exc.strerror or str(exc), str(sink))) from None
        try:
            out.flush()
        except OSError as exc:
            raise _LocalWriteError(OSError(exc.errno, exc.strerror or str(exc), str(sink))) from None


async def check_batch_api(host: BatchHost) -> None:
    """The pre-flight's check of batch mode: the Files and Batches endpoints answer a
    listing call with this key (raises ``ModelError``, nothing is uploaded)."""
    await control_request(host, "GET", "/files?purpose=batch&limit=1")
    await control_request(host, "GET", "/batches?limit=1")
