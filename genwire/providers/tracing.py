"""OpenTelemetry traces of a run (SPEC §19), only when asked for.

With the extra ``genwire[otel]`` installed and the standard environment set
(``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
``OTEL_TRACES_EXPORTER``; ``OTEL_SERVICE_NAME`` names the service), genwire makes a span
per run (``genwire.run``), pre-flight check (``genwire.preflight.check``), row batch
(``genwire.batch``) and model request (``chat <model>`` / ``embeddings <model>``, the
GenAI semantic conventions' names and attributes), each a child of the one it runs in,
and exports them over OTLP/HTTP. Without the extra or the environment this module imports
nothing of OpenTelemetry, and each hook costs one global read.

What a span carries: aliases, model names, row indices, token counts, error classes.
Never a header, a key or a URL's userinfo; prompts and answers only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from genwire.errors import ModelError

__all__ = [
    "RunTrace",
    "Traced",
    "answered",
    "batch_span",
    "check_span",
    "flush",
    "request_span",
    "span",
    "start_run_trace",
    "trace_cache_hit",
    "tracer",
]

log = logging.getLogger("genwire.tracing")

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
CAPTURE_VAR = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
CONTENT_CHARS = 16_384  # a captured prompt or answer is cut to this many characters
OPERATIONS = {"/chat/completions": "chat", "/embeddings": "embeddings"}


class _State:
    checked = False
    tracer: Any = None
    provider: Any = None
    capture = False


_state = _State()
# The row batch a request is made for (the engine's batch span sets it): genwire.batch.id.
_batch_id: ContextVar[str | None] = ContextVar("genwire_trace_batch", default=None)


def tracer() -> Any:
    """The OpenTelemetry tracer, or None when traces are off (decided once per process)."""
    if _state.checked:
        return _state.tracer
    _state.checked = True
    env = os.environ
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none" or (not exporter and not any(env.get(v) for v in ENDPOINT_VARS)):
        return None
    try:
        return _start(exporter, env)
    except ImportError:
        log.warning(
            "OpenTelemetry is configured in the environment but genwire[otel] is not installed "
            "(pip install 'genwire[otel]'); no traces are sent"
        )
    except Exception as exc:  # a malformed OTEL_* value: the run goes on without traces
        log.warning("cannot start OpenTelemetry traces (%s); no traces are sent", exc)
    return None


def _start(exporter: str, env: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    span_exporter: Any
    if exporter == "console":
        span_exporter = ConsoleSpanExporter(out=sys.stderr)  # stdout may owe --json its one object
    else:
        if exporter not in ("", "otlp"):
            log.warning("OTEL_TRACES_EXPORTER=%s is not supported by genwire; sending OTLP over HTTP", exporter)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        span_exporter = OTLPSpanExporter()  # endpoint, headers, timeout: from the OTEL_* environment
    from genwire.version import __version__

    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; genwire by default.
    provider = TracerProvider(resource=Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or "genwire"}))
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    _state.provider = provider
    _state.tracer = provider.get_tracer("genwire", __version__)
    _state.capture = env.get(CAPTURE_VAR, "").strip().lower() == "true"
    return _state.tracer


def flush(timeout_s: float = 10.0) -> None:
    """Export the spans ended so far (the end of a run: a process may exit right after)."""
    if _state.provider is not None:
        _state.provider.force_flush(int(timeout_s * 1000))


def error_type(error: BaseException) -> str:
    """``error.type``: a model error's class (``rate_limited``, ``auth``...), else the exception's type."""
    return error.error_class.value if isinstance(error, ModelError) else type(error).__name__


class Traced:
    """A span in progress (the current one while its block runs)."""

    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def set(self, attributes: Mapping[str, Any]) -> None:
        self.span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def fail(self, kind: str, message: str = "") -> None:
        from opentelemetry.trace import Status, StatusCode

        from genwire.scrub import excerpt, without_urls

        self.span.set_attribute("error.type", kind)
        # Every span's status comes through here: no URL (and no secret) in any of them.
        self.span.set_status(Status(StatusCode.ERROR, without_urls(excerpt(message, 1000))))


@contextlib.contextmanager
def span(
    name: str, attributes: Mapping[str, Any] | None = None, *, batch_id: str | None = None
) -> Iterator[Traced | None]:
    """A span around the block, current inside it (children started inside, in tasks too,
    are its children); None when traces are off. An exception ends it with ``error.type``.
    ``batch_id``: this block is a row batch (requests inside carry ``genwire.batch.id``)."""
    t = tracer()
    if t is None:
        yield None
        return
    token = _batch_id.set(batch_id) if batch_id is not None else None
    try:
        with t.start_as_current_span(
            name, attributes=dict(attributes or {}), record_exception=False, set_status_on_exception=False
        ) as current:
            traced = Traced(current)
            try:
                yield traced
            except BaseException as exc:
                traced.fail(error_type(exc), str(exc) if isinstance(exc, Exception) else "interrupted")
                raise
    finally:
        if token is not None:
            _batch_id.reset(token)


def _request_attributes(alias: str, model: str, path: str, cache_hit: bool) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": OPERATIONS.get(path, path.strip("/")),
        "gen_ai.system": "openai",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": model,
        "genwire.model.alias": alias,
        "genwire.cache.hit": cache_hit,
    }
    batch = _batch_id.get()
    if batch is not None:
        attributes["genwire.batch.id"] = batch
    return attributes


@contextlib.contextmanager
def request_span(alias: str, path: str, payload: Mapping[str, Any]) -> Iterator[Traced | None]:
    """The span of one model request sent (retries included); None when traces are off."""
    model = str(payload.get("model", ""))
    operation = OPERATIONS.get(path, path.strip("/"))
    with span(f"{operation} {model}", _request_attributes(alias, model, path, cache_hit=False)) as traced:
        if traced is not None and _state.capture:
            part = payload.get("messages", payload.get("input"))
            traced.set({"gen_ai.input.messages": _content(part)})
        yield traced


def answered(traced: Traced | None, data: Any, attempts: int) -> None:
    """What the answer says: response model, token usage, finish reasons (and the text
    when capture is on)."""
    if traced is None or not isinstance(data, dict):
        return
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    attributes: dict[str, Any] = {
        "genwire.attempts": attempts,
        "gen_ai.response.model": data.get("model") if isinstance(data.get("model"), str) else None,
        "gen_ai.response.id": data.get("id") if isinstance(data.get("id"), str) else None,
        "gen_ai.usage.input_tokens": usage.get("prompt_tokens") if type(usage.get("prompt_tokens")) is int else None,
        "gen_ai.usage.output_tokens": usage.get("completion_tokens")
        if type(usage.get("completion_tokens")) is int
        else None,
    }
    choices = data.get("choices")
    if isinstance(choices, list):
        reasons = [c.get("finish_reason") for c in choices if isinstance(c, dict)]
        attributes["gen_ai.response.finish_reasons"] = [r for r in reasons if isinstance(r, str)] or None
        if _state.capture:
            messages = [c.get("message") for c in choices if isinstance(c, dict)]
            attributes["gen_ai.output.messages"] = _content(messages)
    traced.set(attributes)


def trace_cache_hit(alias: str, model: str, path: str) -> None:
    """A zero-length request span for an answer the response cache served (nothing sent)."""
    t = tracer()
    if t is None:
        return
    operation = OPERATIONS.get(path, path.strip("/"))
    t.start_span(f"{operation} {model}", attributes=_request_attributes(alias, model, path, cache_hit=True)).end()


def _content(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= CONTENT_CHARS else text[: CONTENT_CHARS - 1] + "…"


def batch_span(indices: list[int]) -> contextlib.AbstractContextManager[Traced | None]:
    """The span of one row batch (``genwire.batch.id``: its first and last row)."""
    if not indices or tracer() is None:
        return contextlib.nullcontext()
    batch_id = f"rows {indices[0]}-{indices[-1]}"
    attributes = {"genwire.batch.id": batch_id, "genwire.rows.first": indices[0], "genwire.rows.count": len(indices)}
    return span("genwire.batch", attributes, batch_id=batch_id)


class RunTrace:
    """The run's span, current from ``start_run_trace`` until ``end`` (in the same task)."""

    def __init__(self, current: Any, token: Any) -> None:
        self.traced = Traced(current)
        self._token = token

    def end(self, error: BaseException | None) -> None:
        from opentelemetry import context

        if error is not None:
            self.traced.fail(error_type(error), str(error) if isinstance(error, Exception) else "interrupted")
        self.traced.span.end()
        context.detach(self._token)
        flush()


def start_run_trace(attributes: Mapping[str, Any]) -> RunTrace | None:
    """Start the run's span and make it the current one (None when traces are off)."""
    t = tracer()
    if t is None:
        return None
    from opentelemetry import context, trace

    current = t.start_span("genwire.run", attributes=dict(attributes))
    return RunTrace(current, context.attach(trace.set_span_in_context(current)))


def check_span(kind: Any, targets: list[str], variant: str | None) -> contextlib.AbstractContextManager[Traced | None]:
    """The span of one pre-flight check (the probe of one or more aliases sharing an endpoint)."""
    if tracer() is None:
        return contextlib.nullcontext()
    attributes = {
        "genwire.check.kind": str(getattr(kind, "value", kind)),
        "genwire.check.targets": targets,
        "genwire.check.variant": variant,
    }
    return span("genwire.preflight.check", {k: v for k, v in attributes.items() if v is not None})
