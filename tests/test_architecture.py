"""The import direction of SPEC §8: a module never imports from a layer above it, and the
package never imports genwire.testing."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).parent.parent / "genwire"
LAYERS = ["errors", "config", "providers", "generators", "container", "preflight", "engine", "app", "cli"]
IMPORT = re.compile(r"^\s*(?:from|import) genwire\.(\w+)", re.M)


def test_imports_only_point_down() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        layer = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if layer in ("__init__", "testing"):
            continue
        assert layer in rank, f"{path} is in no layer; add it to LAYERS in the right place"
        for target in IMPORT.findall(path.read_text()):
            if target == "testing" or rank.get(target, -1) > rank[layer]:
                upward.append(f"{path.relative_to(PACKAGE.parent)} imports genwire.{target}")
    assert upward == []


def test_dependency_injector_stays_behind_the_container() -> None:
    users = sorted(
        str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py") if "dependency_injector" in p.read_text()
    )
    assert users == ["genwire/container/core.py", "genwire/container/graph.py"]
    assert not any("@inject" in p.read_text() or ".wire(" in p.read_text() for p in PACKAGE.rglob("*.py"))
