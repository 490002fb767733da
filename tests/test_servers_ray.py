"""A managed server on Ray (SPEC §23, §22): without ``gpus`` it runs where the driver
runs, the workers call it, and nothing of it is left when the run ends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servers_support import genwire, marker, one_server_config, port_free, ports_in, wait_gone

pytest.importorskip("ray")


def test_a_ray_run_with_a_managed_server_finishes_and_leaves_no_process(tmp_path: Path) -> None:
    model = marker()
    (tmp_path / "genwire.yaml").write_text(one_server_config(model, "--child"))
    ran = genwire("run", "--json", "--engine", "ray", "--workers", "1", "genwire.yaml", cwd=tmp_path, timeout=600)
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    assert summary["rows_written"] == 4 and summary["models"]["m"]["requests"] >= 4  # the workers' requests too
    assert wait_gone(model, timeout=1.0) == []
    assert all(port_free(p) for p in ports_in(tmp_path / "out/data.jsonl.servers/stand_in.log"))
