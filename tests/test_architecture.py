"""The house rules: a module never imports from a layer above it, the package never
imports genwire.testing, and dependency-injector stays behind the container's API
(docs/architecture.md describes the layers)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).parent.parent / "genwire"
LAYERS = [
    *("scrub", "version", "lazy", "errors", "config", "providers", "generators"),
    *("container", "preflight", "engine", "app", "cli"),
]
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


# What only the container package may touch: its graph and dependency-injector's API.
_PRIVATE_TO_CONTAINER = {"_graph", "overridden", "traverse", "reset_last_overriding", "reset_singletons"}


def test_nothing_outside_the_container_uses_its_graph_or_dependency_injector() -> None:
    users = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "container":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in _PRIVATE_TO_CONTAINER:
                users.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                if any(n.startswith("dependency_injector") for n in names):
                    users.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports dependency_injector")
    assert users == []


def _holds_di_object(value: Any, seen: set[int], depth: int = 0) -> bool:
    if id(value) in seen or depth > 6:
        return False
    seen.add(id(value))
    if type(value).__module__.startswith("dependency_injector"):
        return True
    if isinstance(value, dict):
        return any(_holds_di_object(v, seen, depth + 1) for v in value.values())
    if isinstance(value, list | tuple | set):
        return any(_holds_di_object(v, seen, depth + 1) for v in value)
    if hasattr(value, "__dict__") and type(value).__module__.startswith("genwire"):
        return any(_holds_di_object(v, seen, depth + 1) for v in vars(value).values())
    return False


async def test_the_public_api_hands_out_no_dependency_injector_object(tmp_path: Path) -> None:
    """The boundary by use: what the container's public methods return is genwire's."""
    import genwire

    people = tmp_path / "people.jsonl"
    people.write_text('{"name": "Ann"}\n')
    cfg = {
        "datasets": {"people": {"kind": "jsonl", "path": str(people)}},
        "pipeline": {
            "num_records": 1,
            "output": str(tmp_path / "out.jsonl"),
            "columns": [{"name": "p", "generator": "seed-dataset", "resources": {"dataset": "people"}}],
        },
    }
    async with genwire.boot(cfg) as container:
        returned = [
            container.plan(),
            container.resource("people"),
            container.generator("p"),
            container.columns,
            container.concurrency(),
            container.usage_by_model(),
            container.overridden_names(),
            await container.preflight(),
            await container.run(resume=False),
        ]
    assert not any(_holds_di_object(value, set()) for value in returned)
