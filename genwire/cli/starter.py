"""``genwire init``: copy the starter pipeline (offline models, sample documents)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from genwire.errors import ConfigError

STARTER = "genwire.cli"


def starter_files() -> dict[str, str]:
    """Relative path -> text of every starter file shipped in the package."""
    root = resources.files(STARTER) / "starter"
    # genwire.schema.json: the JSON Schema the first line of genwire.yaml names, so an
    # editor checks and completes the file (the copy is generated: scripts/generate_docs.py).
    files = {name: (root / name).read_text(encoding="utf-8") for name in ("genwire.yaml", "genwire.schema.json")}
    for doc in sorted((root / "docs").iterdir(), key=lambda t: t.name):
        if doc.name.endswith(".md"):
            files[f"docs/{doc.name}"] = doc.read_text(encoding="utf-8")
    return files


def write_starter(directory: Path, *, force: bool = False) -> list[Path]:
    """Write the starter, all or nothing: every reason it cannot be written is found
    before the first file is, and a user's own files are never overwritten or mixed in
    (``--force`` replaces genwire.yaml and genwire.schema.json only)."""
    files = starter_files()
    config = directory / "genwire.yaml"
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"{directory}: exists and is not a directory")
    for path in (config, directory / "genwire.schema.json"):
        if path.exists() and not force:
            raise ConfigError(f"{path}: already exists; pass --force to overwrite it")
    docs = directory / "docs"
    if docs.exists() or docs.is_symlink():
        what = "a directory" if docs.is_dir() else "a file"
        raise ConfigError(
            f"{docs}: already exists ({what}); the starter's documents would mix with yours. "
            "Run genwire init in a new directory"
        )
    written: list[Path] = []
    try:
        for rel, text in files.items():
            path = directory / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except OSError as exc:
        for path in written:  # nothing half-written stays behind
            path.unlink(missing_ok=True)
        if written and docs.is_dir():
            docs.rmdir()
        raise ConfigError(f"{directory}: cannot write the starter there: {exc.strerror or exc}") from None
    return written
