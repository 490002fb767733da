"""Running the embedded models: thread policy and the CPU gate, the two runtimes, the
process-wide cache of loaded weights and the inference executor."""

from __future__ import annotations

import concurrent.futures
import os
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from genwire.errors import ErrorClass, ModelError, exception_text
from genwire.providers.local.catalog import (
    _CHAT_INSTALL,
    CATALOG,
    CHAT_SPEC,
    EMBEDDING_SPEC,
    INSTALL_LOCAL,
    LocalModelSpec,
    _import,
    model_files,
)

THREADS_ENV = "GENWIRE_LOCAL_THREADS"


def _cpu_threads(cores: int | None = None) -> int:
    """Threads per inference call: $GENWIRE_LOCAL_THREADS, else half the cores (1 to 4).

    llama.cpp's threads wait on each other at every op: when one is descheduled by another
    busy process, the call stalls. Measured on 2 cores beside two busy processes, a
    16-token answer took 2-6.5 s with 2 threads and 0.7-0.9 s with 1 (idle: 0.32 s and
    0.43 s), and the README's example ran 95 s with 2 and 18 s with 1. Half the cores
    leaves room for the other call (_CPU_SLOTS) or another process; more than 4 only adds
    contention for these small models.
    """
    configured = os.environ.get(THREADS_ENV, "").strip()
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return max(1, min(4, (cores or os.cpu_count() or 1) // 2))


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
        return self.embed_counted(texts)[0]

    def embed_counted(self, texts: Sequence[str]) -> tuple[list[list[float]], int]:
        """The vectors and the input tokens they took (what an endpoint's ``usage`` says)."""
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
        return out, sum(len(row) for row in ids)

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
