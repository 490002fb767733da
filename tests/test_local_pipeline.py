"""The embedded models inside a real pipeline: pre-flight and the README's main job."""

from __future__ import annotations

import fnmatch
import json
import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner

import genwire
from genwire.cli.main import cli

REPO = Path(__file__).parent.parent
EXAMPLE = REPO / "examples" / "retrieval"


def local_config(dimensions: int) -> dict[str, Any]:
    return {
        "providers": {"local": {"kind": "local"}},
        # Loading the weights on a loaded 2-core machine can take longer than the default
        # 20 s: these tests check what the probes find, not how fast.
        "preflight": {"timeout_s": 300, "deadline_s": 600},
        "models": {
            "writer": {"provider": "local", "model": "SmolLM2-135M-Instruct", "kind": "chat"},
            "embedder": {
                "provider": "local",
                "model": "all-MiniLM-L6-v2",
                "kind": "embedding",
                "dimensions": dimensions,
            },
            "ghost": {"provider": "local", "model": "no-such-model", "kind": "chat"},
        },
        "pipeline": {
            "columns": [
                {"name": "t", "generator": "sampler", "params": {"kind": "category", "values": ["a"]}},
                {
                    "name": "q",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "{{ t }}"},
                },
                {
                    "name": "g",
                    "generator": "llm-text",
                    "resources": {"model": "ghost"},
                    "params": {"prompt": "{{ t }}"},
                },
                {"name": "v", "generator": "embedding", "resources": {"model": "embedder"}, "params": {"column": "q"}},
            ]
        },
    }


async def test_local_preflight_checks_dimensions_for_real() -> None:
    for dims, status, error_class in ((384, "ok", None), (768, "failed", "bad_response")):
        container = genwire.boot(local_config(dims))
        async with container:
            report = await container.preflight()
        embedder = report.check("embedder")
        assert (embedder.status, embedder.error_class) == (status, error_class), embedder.message
        assert report.check("writer").status == "ok"
        ghost = report.check("ghost")
        assert ghost.error_class == "not_found" and "SmolLM2-135M-Instruct" in ghost.message
    assert "384 dimensions" in embedder.message and "768" in embedder.message


def test_main_job_on_the_embedded_models(tmp_path: Path) -> None:
    project = tmp_path / "retrieval"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("out", ".genwire"))
    config = project / "genwire.yaml"
    shipped = "\npreflight:\n  timeout_s: 30\n  deadline_s: 90\n"
    assert shipped in config.read_text()
    # The example as shipped, with room for loading the weights on a loaded 2-core machine
    # (its 30 s probe timeout is a speed this test does not assert).
    config.write_text(config.read_text().replace(shipped, "\npreflight: {timeout_s: 300, deadline_s: 600}\n"))
    result = CliRunner().invoke(cli, ["run", str(config), "-n", "3"])
    assert result.exit_code == 0, result.output
    out = project / "out" / "retrieval.jsonl"
    assert f"dataset written to {out}" in result.stdout
    assert "Pre-flight: passed" in result.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 3
    for row in rows:
        assert row["question"].strip() and row["positive_id"] == row["passage"]["id"]
        negatives = row["hard_negatives"]
        assert len(negatives) == 3 and all(n["id"] != row["positive_id"] and n["text"] for n in negatives)
        assert negatives == sorted(negatives, key=lambda n: -n["score"])


def git_ignored(relative: Path) -> bool:
    """Whether the repository's .gitignore ignores this path: its patterns are names or
    globs (no slash inside), a trailing slash meaning a directory, matched against any
    part of the path, as git does for such patterns."""
    patterns = [
        line.strip()
        for line in (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert not any("/" in p.rstrip("/") or p.startswith("!") for p in patterns), "extend git_ignored()"
    parts = relative.parts
    for pattern in patterns:
        name = pattern.rstrip("/")
        # A directory pattern matches a parent directory; a plain one any part, the file too.
        candidates = parts[:-1] if pattern.endswith("/") else parts
        if any(fnmatch.fnmatchcase(part, name) for part in candidates):
            return True
    return False


def files_under(root: Path) -> dict[str, str]:
    """A folder's files as git would commit them: what .gitignore ignores (a run's out/,
    the response cache in .genwire/) is not part of the comparison."""
    return {
        str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not git_ignored(p.relative_to(root))
    }


def test_git_ignored_follows_the_gitignore() -> None:
    assert git_ignored(Path("out/retrieval.jsonl"))
    assert git_ignored(Path(".genwire/cache/responses.sqlite3"))
    assert git_ignored(Path("docs/__pycache__/x.pyc"))
    assert not git_ignored(Path("genwire.yaml")) and not git_ignored(Path("docs/genwire.md"))
    assert not git_ignored(Path("out"))  # a file named like an ignored directory is kept


def test_the_example_is_what_init_writes(tmp_path: Path) -> None:
    # The package's starter is the one source; examples/retrieval is a real directory (a run
    # writes its out/ there, never inside the package) holding exactly what init writes.
    starter = Path(genwire.__file__).parent / "cli" / "starter"
    assert not EXAMPLE.is_symlink() and not (EXAMPLE / "docs").is_symlink()
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "new")])
    assert result.exit_code == 0
    written = files_under(tmp_path / "new")
    example = files_under(EXAMPLE)
    assert written == example, "examples/retrieval differs from genwire init: copy genwire/cli/starter there"
    shipped = files_under(starter)
    assert written == shipped
    assert CliRunner().invoke(cli, ["validate", str(tmp_path / "new" / "genwire.yaml")]).exit_code == 0
    again = CliRunner().invoke(cli, ["init", str(tmp_path / "new")])
    assert again.exit_code == 2 and "already exists; pass --force" in again.stderr
