"""``genwire init``: copy the starter pipeline (offline models, sample documents)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from genwire.errors import ConfigError

STARTER = "genwire.cli"


def starter_files() -> dict[str, str]:
    """Relative path -> text of every starter file shipped in the package."""
    root = resources.files(STARTER) / "starter"
    files = {"genwire.yaml": (root / "genwire.yaml").read_text(encoding="utf-8")}
    for doc in sorted((root / "docs").iterdir(), key=lambda t: t.name):
        if doc.name.endswith(".md"):
            files[f"docs/{doc.name}"] = doc.read_text(encoding="utf-8")
    return files


def write_starter(directory: Path, *, force: bool = False) -> list[Path]:
    config = directory / "genwire.yaml"
    if config.exists() and not force:
        raise ConfigError(f"{config}: already exists; pass --force to overwrite it")
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{directory}: exists and is not a directory")
    written = []
    for rel, text in starter_files().items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
