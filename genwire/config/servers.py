"""``servers:`` in genwire.yaml (SPEC §23): inference servers genwire starts, checks,
restarts and stops, declared like models. A provider names one with ``server:`` instead
of a ``base_url``.

``env`` values are secret strings: never printed, logged, cached or repr'd. Whether a
kind's engine is installed is found here (``missing_engine``), without importing it, so
``genwire validate`` names what to install.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr, model_validator

from genwire.config.strict import StrictValues
from genwire.config.tools import check_env

ServerKind = Literal["vllm", "sglang", "llama.cpp", "command"]
Port = Annotated[int, Field(ge=1, le=65535)]


class ServerConfig(StrictValues):  # unknown keys are errors; values taken as written
    """One inference server spec; ``replicas`` of it are started behind one provider."""

    kind: ServerKind
    # The name the server serves its model under (--served-model-name / --alias), which
    # models.<alias>.model names; for llama.cpp also the GGUF file (or a local catalog name).
    model: Annotated[str, Field(min_length=1)]
    # kind command: the argv, {port} and {host} filled in (no shell).
    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None
    args: list[str] = Field(default_factory=list)  # passed through to the server as written
    health: Annotated[str, Field(pattern=r"^/\S*$")] | None = None  # kind command: readiness path
    gpus: list[Annotated[int, Field(ge=0)]] | None = None  # CUDA_VISIBLE_DEVICES, shared by the replicas
    env: Annotated[dict[str, SecretStr], AfterValidator(check_env)] = Field(default_factory=dict)
    port: Port | Literal["auto"] = "auto"  # a fixed port: replica i listens on port + i
    startup_timeout_s: Annotated[float, Field(gt=0)] = 600.0
    stop_timeout_s: Annotated[float, Field(gt=0)] = 30.0
    restarts: Annotated[int, Field(ge=0, le=100)] = 2
    replicas: Annotated[int, Field(ge=1, le=64)] = 1

    @model_validator(mode="after")
    def _kind_keys(self) -> ServerConfig:
        if self.kind == "command" and self.command is None:
            raise ValueError("kind: command needs command: (the server's argv, with {port} where its port goes)")
        if self.kind != "command" and (self.command is not None or self.health is not None):
            raise ValueError(f"command: and health: belong to kind: command; kind {self.kind} builds its own command")
        if self.gpus is not None and (not self.gpus or len(self.gpus) % self.replicas):
            raise ValueError(
                f"gpus {self.gpus} cannot be shared evenly by {self.replicas} replicas; "
                "give each replica the same number of GPUs"
            )
        twice = sorted({g for g in self.gpus or () if (self.gpus or []).count(g) > 1})
        if twice:
            raise ValueError(f"GPU {twice[0]} is listed twice in gpus")
        return self

    @property
    def health_path(self) -> str:
        return self.health or "/health"

    def spec_hash(self) -> str:
        """What decides whether a held server serves this spec (SPEC §23: kind, model,
        args, gpus, env, and the command): a hash, safe to keep (env values hashed too)."""
        env = {name: value.get_secret_value() for name, value in sorted(self.env.items())}
        spec = [self.kind, self.model, self.command, self.args, self.gpus, env, self.health_path]
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]

    def display(self) -> str:
        """What the plan shows: the kind and model (env values never)."""
        return f"{self.kind} {self.model}" + (f" x{self.replicas}" if self.replicas > 1 else "")


# What each kind runs, and what to install when it is missing.
_INSTALL = {
    "vllm": "vLLM, which is not installed (no `vllm` on PATH): pip install vllm",
    "sglang": "SGLang, which is not installed: pip install 'sglang[all]'",
    "llama.cpp": "llama.cpp's server, which is not installed (no `llama-server` on PATH and no xllamacpp): "
    "install llama.cpp, or pip install 'genwire[local]'",
}


def _module_found(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken or blocked install
        return False


def missing_engine(config: ServerConfig) -> str | None:
    """Why ``config``'s server cannot start here (its engine is not installed), in words
    naming what to install; None when it is installed. Nothing is imported."""
    if config.kind == "vllm":
        found = shutil.which("vllm") is not None
    elif config.kind == "sglang":
        found = _module_found("sglang")
    elif config.kind == "llama.cpp":
        found = shutil.which("llama-server") is not None or _module_found("xllamacpp")
    else:
        assert config.command is not None
        program = config.command[0]
        if shutil.which(program) is None:
            return f"kind command: {program!r} is not an executable on PATH (nor a path to one)"
        return None
    return None if found else f"kind {config.kind} needs {_INSTALL[config.kind]}"
