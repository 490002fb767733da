"""What each server kind runs (SPEC §23), and with which environment: only the declared
``env``, plus PATH, HOME and the replica's share of ``gpus``."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from genwire.config.servers import ServerConfig

HOST = "127.0.0.1"


def argv(config: ServerConfig, port: int, model_path: Path | None = None) -> list[str]:
    """The server's argv on ``port``; ``model_path``: llama.cpp's GGUF file, resolved."""
    where = ["--host", HOST, "--port", str(port)]
    if config.kind == "vllm":
        return ["vllm", "serve", config.model, *where, "--served-model-name", config.model, *config.args]
    if config.kind == "sglang":
        launch = [sys.executable, "-m", "sglang.launch_server", "--model-path", config.model, *where]
        return [*launch, "--served-model-name", config.model, *config.args]
    if config.kind == "llama.cpp":
        gguf = str(model_path or config.model)
        binary = shutil.which("llama-server")
        program = [binary] if binary else [sys.executable, "-m", "genwire.providers.servers.xllama"]
        return [*program, "-m", gguf, *where, "--alias", config.model, *config.args]
    assert config.command is not None  # the schema's rule for kind command
    filled = [part.replace("{port}", str(port)).replace("{host}", HOST) for part in config.command]
    return [*filled, *config.args]


def environment(config: ServerConfig, replica: int) -> dict[str, str]:
    """The replica's whole environment: declared env, PATH, HOME, its GPUs."""
    env = {name: value.get_secret_value() for name, value in config.env.items()}
    for name in ("PATH", "HOME"):
        if name in os.environ and name not in env:
            env[name] = os.environ[name]
    if config.gpus is not None:
        share = len(config.gpus) // config.replicas
        mine = config.gpus[replica * share : (replica + 1) * share]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in mine)
    return env


def secrets_of(config: ServerConfig) -> list[str]:
    """Every declared env value: scrubbed from whatever of the server's log is shown."""
    return [value.get_secret_value() for value in config.env.values()]
