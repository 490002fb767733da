"""The checkpoint's fingerprint holds the datasets' content (SPEC §9): a dataset replaced
by other content of the same size with its old mtime (``cp -p``, ``tar x``, ``rsync -t``)
is refused on resume, naming the dataset and ``--fresh``; one whose mtime alone changed
(``touch``) resumes. Real processes against the fake server."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import StopAfter, cli

import genwire
from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.testing import FakeOpenAIServer

NAMES = ["Ann", "Bob", "Cid", "Dee", "Eve", "Fay", "Gus", "Hal"]


def pipeline(server: FakeOpenAIServer, root: Path, kind: str) -> dict[str, Any]:
    if kind == "documents":
        dataset = {"kind": "documents", "path": str(root / "docs"), "chunk_chars": 100}
        column: dict[str, Any] = {"name": "passage", "generator": "seed-dataset", "resources": {"dataset": "seed"}}
        prompt = "About {{ passage }}"
    else:
        dataset = {"kind": "jsonl", "path": str(root / "people.jsonl")}
        column = {"name": "person", "generator": "seed-dataset", "resources": {"dataset": "seed"}}
        prompt = "Greet {{ person.name }}"
    return {
        "providers": {"srv": {"kind": "openai", "base_url": server.url, "api_key": "k"}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "datasets": {"seed": dataset},
        "pipeline": {
            "num_records": 8,
            "seed": 3,
            "batch_size": 2,
            "output": str(root / "out.jsonl"),
            "columns": [
                column,
                {"name": "q", "generator": "llm-text", "resources": {"model": "writer"}, "params": {"prompt": prompt}},
            ],
        },
    }


def write_dataset(root: Path, kind: str, names: list[str]) -> Path:
    """The dataset file (or one document of the folder), holding ``names``."""
    if kind == "documents":
        (root / "docs").mkdir(exist_ok=True)
        (root / "docs" / "b.md").write_text("A second document that stays the same.\n", encoding="utf-8")
        path = root / "docs" / "a.md"
        path.write_text("".join(f"{n} is a person in this story.\n\n" for n in names), encoding="utf-8")
        return path
    path = root / "people.jsonl"
    path.write_text("".join(f'{{"name": "{n}"}}\n' for n in names), encoding="utf-8")
    return path


async def interrupted(cfg: dict[str, Any]) -> None:
    async with genwire.boot(cfg) as container:
        with pytest.raises(StopAfter.Stop):
            await container.run(progress=StopAfter(2), response_cache=False)
    assert checkpoint_dir(Path(cfg["pipeline"]["output"])).exists()


@pytest.mark.parametrize("kind", ["jsonl", "documents"])
@pytest.mark.parametrize("how", ["utime", "cp -p"])
async def test_same_size_other_content_old_mtime_is_refused_naming_the_dataset(
    tmp_path: Path, kind: str, how: str
) -> None:
    with FakeOpenAIServer() as server:
        dataset = write_dataset(tmp_path, kind, NAMES)
        before = dataset.stat()
        cfg = pipeline(server, tmp_path, kind)
        config = tmp_path / "genwire.yaml"
        config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        await interrupted(cfg)

        swapped = list(reversed(NAMES))  # same bytes, other order: same size
        if how == "utime":
            write_dataset(tmp_path, kind, swapped)
            os.utime(dataset, ns=(before.st_atime_ns, before.st_mtime_ns))
        else:
            elsewhere = tmp_path / "new"
            elsewhere.mkdir()
            source = write_dataset(elsewhere, kind, swapped)
            os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
            subprocess.run(["cp", "-p", str(source), str(dataset)], check=True)
        after = dataset.stat()
        assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)

        server.reset_stats()
        proc = cli("run", config, "--no-response-cache")
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert "datasets.seed.path (the content of" in proc.stderr and "changed" in proc.stderr
        assert "--fresh" in proc.stderr
        assert server.requests["writer"] == 0
        assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("kind", ["jsonl", "documents"])
async def test_a_touched_dataset_with_the_same_content_resumes(tmp_path: Path, kind: str) -> None:
    with FakeOpenAIServer() as server:
        dataset = write_dataset(tmp_path, kind, NAMES)
        cfg = pipeline(server, tmp_path, kind)
        config = tmp_path / "genwire.yaml"
        config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
        await interrupted(cfg)
        copy = tmp_path / "copy"
        shutil.copyfile(dataset, copy)  # a fresh mtime, then the same bytes back
        os.replace(copy, dataset)
        os.utime(dataset, ns=(dataset.stat().st_atime_ns, dataset.stat().st_mtime_ns + 10**10))

        proc = cli("run", config, "--no-response-cache")
        assert proc.returncode == 0, proc.stderr
        assert "4 resumed" in proc.stdout
