"""Paths as the user named them: a config reached through a symlinked directory resolves
its relative paths (output, errors file, checkpoint, datasets) against that directory, and
says so; the write-safety checks still compare real paths; nothing is written inside the
genwire package."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from support import cli

import genwire

CONFIG = """
datasets:
  rows: {kind: jsonl, path: data/rows.jsonl}
pipeline:
  num_records: 4
  output: out/x.jsonl
  max_failure_rate: MAX_FAILURE_RATE
  columns:
    - {name: passage, generator: seed-dataset, resources: {dataset: rows}}
    - {name: title, generator: template, params: {template: "{{ passage.text }}: {{ passage['title'] }}"}}
"""


def project(tmp_path: Path, max_failure_rate: float = 0.9) -> tuple[Path, Path]:
    """``real/`` holding the pipeline and its dataset (one row lacks ``title``, so it fails),
    and ``link -> real``: the path the user types."""
    real = tmp_path / "real"
    (real / "data").mkdir(parents=True)
    rows = [{"text": "a", "title": "A"}, {"text": "b"}, {"text": "c", "title": "C"}, {"text": "d", "title": "D"}]
    (real / "data" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (real / "genwire.yaml").write_text(CONFIG.replace("MAX_FAILURE_RATE", str(max_failure_rate)))
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)
    return real, link


def test_outputs_land_where_the_user_named_the_config(tmp_path: Path) -> None:
    _, link = project(tmp_path)
    proc = cli("run", "link/genwire.yaml", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary: dict[str, Any] = json.loads(proc.stdout)
    assert summary["output"] == str(link / "out" / "x.jsonl")  # not .../real/out/x.jsonl
    assert summary["errors_file"] == str(link / "out" / "x.jsonl.errors.jsonl")
    assert summary["rows_written"] == 3 and summary["rows_failed"] == 1  # the dataset was found
    assert (link / "out" / "x.jsonl").is_file()
    proc = cli("run", "link/genwire.yaml", "--fresh", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"dataset written to {link / 'out' / 'x.jsonl'}" in proc.stdout
    assert "real" not in proc.stdout


def test_the_checkpoint_of_a_stopped_run_is_named_by_the_users_path(tmp_path: Path) -> None:
    _, link = project(tmp_path, max_failure_rate=0.0)
    proc = cli("run", "link/genwire.yaml", "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["checkpoint"] == str(link / "out" / "x.jsonl.checkpoint")
    assert "real" not in summary["error"] and str(link / "out" / "x.jsonl.errors.jsonl") in summary["error"]


def test_an_output_that_is_the_dataset_through_a_link_is_still_refused(tmp_path: Path) -> None:
    real, link = project(tmp_path)
    for output in (real / "data" / "rows.jsonl", link / "data" / "rows.jsonl"):
        proc = cli("run", link / "genwire.yaml", "-o", output)
        assert proc.returncode == 2 and "is a dataset file this pipeline reads" in proc.stderr
    proc = cli("run", real / "genwire.yaml", "-o", link / "data" / "rows.jsonl")
    assert proc.returncode == 2 and "is a dataset file this pipeline reads" in proc.stderr
    assert (real / "data" / "rows.jsonl").read_text().count("\n") == 4


def test_a_run_never_writes_inside_the_genwire_package(tmp_path: Path) -> None:
    starter = Path(genwire.__file__).parent / "cli" / "starter"
    before = sorted(p.relative_to(starter) for p in starter.rglob("*"))
    linked = tmp_path / "starter"
    linked.symlink_to(starter, target_is_directory=True)  # the old examples/retrieval link
    for config in (starter / "genwire.yaml", linked / "genwire.yaml"):
        proc = cli("run", config, "-n", "1")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "inside the genwire package" in proc.stderr and "genwire init" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert sorted(p.relative_to(starter) for p in starter.rglob("*")) == before


def test_relative_paths_resolve_against_the_config_as_named_from_any_cwd(tmp_path: Path) -> None:
    _, link = project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = cli("run", os.path.relpath(link / "genwire.yaml", elsewhere), "--json", cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["output"] == str(link / "out" / "x.jsonl")
    assert not (elsewhere / "out").exists()
