"""The README's commands run on a machine whose Python is ``python3`` only (issue 41 item
26): scripts/install-local.sh and scripts/test.sh pick ``python`` where there is one,
else ``python3``; ``$PYTHON`` still wins."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def chosen(script: str, bin_dir: Path, env: dict[str, str] | None = None) -> str:
    """The interpreter ``script`` picks with only ``bin_dir`` (and bash) on PATH."""
    line = next(x for x in (ROOT / script).read_text().splitlines() if "PYTHON=" in x and x.lstrip()[0] != "#")
    probe = f'{line}\n"$PYTHON" -c "import sys; print(sys.version_info[0])" && echo "$PYTHON"'
    done = subprocess.run(
        ["/bin/bash", "-c", probe],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir), **(env or {})},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1]


@pytest.mark.parametrize("script", ["scripts/install-local.sh", "scripts/test.sh"])
def test_the_scripts_fall_back_to_python3(script: str, tmp_path: Path) -> None:
    only3 = tmp_path / "only3"
    only3.mkdir()
    (only3 / "python3").symlink_to(sys.executable)
    assert chosen(script, only3) == "python3"
    both = tmp_path / "both"
    shutil.copytree(only3, both, symlinks=True)
    (both / "python").symlink_to(sys.executable)
    assert chosen(script, both) == "python"
    assert chosen(script, only3, {"PYTHON": os.path.realpath(sys.executable)}) == os.path.realpath(sys.executable)
