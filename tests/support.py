"""Helpers several test modules share."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from genwire.engine.records.checkpoint import kept_rows
from genwire.generators import Generator, GeneratorMetadata, ResourceKind


class RegistryParams(BaseModel):
    use: str


class RegistryUser(Generator[RegistryParams]):
    """Test generator: calls the alias named in params through its registry (no request
    shape can be known for such a use)."""

    metadata = GeneratorMetadata(
        name="registry-user", description="uses a registry", required_resources={"models": ResourceKind.MODEL_REGISTRY}
    )
    params_model = RegistryParams

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        model = self.resources.models.get(self.params.use)
        return [await model.complete("hi") for _ in rows]


class StopAfter:
    """A progress hook that stops the run after ``batches`` batches: an exception
    mid-run, as any crash would be."""

    class Stop(Exception):
        pass

    def __init__(self, batches: int) -> None:
        self.batches = batches

    def start(self, total: int, done: int = 0) -> None:
        pass

    def advance(self, done: int, failed: int, status: str = "") -> None:
        self.batches -= 1
        if self.batches <= 0:
            raise StopAfter.Stop

    def stop(self) -> None:
        pass


def write(cfg: dict[str, Any], path: Path) -> Path:
    """``cfg`` as a YAML config file at ``path`` (its folder made as needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def _command(args: tuple[str | Path, ...]) -> list[str]:
    return [sys.executable, "-m", "genwire.cli.main", *map(str, args)]


def cli(*args: str | Path, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``genwire ARGS`` in a real process, output captured (``kwargs``: ``cwd``, ...)."""
    return subprocess.run(_command(args), capture_output=True, text=True, timeout=timeout, **kwargs)


def cli_here(
    *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``genwire ARGS`` run inside the test process (click's runner), as ``cli`` returns it:
    for a test about what a command does and says, not about its process (signals, exits,
    start-up), without a Python start and genwire's imports per command. ``env``: variables
    set for the command only."""
    from click.testing import CliRunner

    from genwire.cli.main import cli as genwire_cli

    argv = list(map(str, args))
    # What reaches the root logger goes to the command's stderr, as in a genwire process,
    # where the root logger has no handler and Python's last resort writes it there (here
    # pytest's own handlers on the root would take it instead).
    root = logging.getLogger()
    root.addHandler(logging.lastResort)
    try:
        with contextlib.chdir(cwd) if cwd is not None else contextlib.nullcontext():
            result = CliRunner(env=env).invoke(genwire_cli, argv)
    finally:
        root.removeHandler(logging.lastResort)
    stderr = result.stderr
    if result.exc_info is not None and not isinstance(result.exception, SystemExit):
        # A crash: its traceback on stderr, as the process would print it (the runner keeps it).
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return subprocess.CompletedProcess(argv, result.exit_code, result.stdout, stderr)


def start_cli(*args: str | Path) -> subprocess.Popen[str]:
    """``genwire ARGS`` started in a real process (to signal or kill it), output piped."""
    return subprocess.Popen(_command(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def story_and_review(writer: str = "writer", critic: str = "critic") -> list[dict[str, Any]]:
    """Three columns: a uuid, a story about it (``writer``), a review of the story (``critic``)."""
    return [
        {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
        {
            "name": "story",
            "generator": "llm-text",
            "resources": {"model": writer},
            "params": {"prompt": "Write about {{ uid }}"},
        },
        {
            "name": "review",
            "generator": "llm-text",
            "resources": {"model": critic},
            "params": {"prompt": "Critique {{ story }}"},
        },
    ]


def wait_gone(pid: int, timeout: float = 30.0) -> bool:
    """Whether process ``pid`` ended (or is a zombie) within ``timeout`` seconds."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def wait_for_rows(directory: Path, at_least: int, proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    """Until the checkpoint in ``directory`` holds ``at_least`` kept rows (a run to kill mid-way)."""
    deadline = time.monotonic() + timeout
    while kept_rows(directory) < at_least:
        assert proc.poll() is None, f"the run ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.02)
