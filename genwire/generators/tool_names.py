"""At load: literal tool names a generator calls, checked against the ``allow`` list of
the tool server each column binds (SPEC §18). ``self.resources.web.call("delete", ...)``
with ``delete`` outside ``tools.<server>.allow`` is a wiring error located in the
plugin's source, reported with the others before anything starts, instead of stopping
the run at its first row. Dynamic names are left to the handle's own check at run time.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass

from genwire.generators.source_check import plugin_classes


@dataclass(frozen=True)
class ToolCall:
    slot: str
    tool: str
    file: str
    line: int
    col: int


def _slot_of(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The slot ``node`` names: ``self.resources.x``, ``self.resources["x"]`` or a local
    alias of either."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    base = node.value if isinstance(node, ast.Attribute | ast.Subscript) else None
    if not (isinstance(base, ast.Attribute) and base.attr == "resources" and isinstance(base.value, ast.Name)):
        return None
    if base.value.id != "self":
        return None
    if isinstance(node, ast.Attribute):
        return node.attr
    key = node.slice if isinstance(node, ast.Subscript) else None
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def _calls(tree: ast.AST, file: str, offset: int) -> Iterator[ToolCall]:
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        aliases: dict[str, str] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                slot = _slot_of(node.value, {})
                if slot is not None:
                    aliases[node.targets[0].id] = slot
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "call"):
                continue
            slot = _slot_of(node.func.value, aliases)
            first = node.args[0] if node.args else None
            if slot is not None and isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield ToolCall(slot, first.value, file, node.lineno + offset, node.col_offset + 1)


_SCANNED: dict[type, tuple[ToolCall, ...]] = {}  # a class's source does not change in a process


def literal_tool_calls(cls: type) -> tuple[ToolCall, ...]:
    """Every ``<tools slot>.call("literal", ...)`` in ``cls`` and the plugin classes it
    inherits from (none when the source cannot be read: the static check notes that)."""
    if cls not in _SCANNED:
        _SCANNED[cls] = _scan(cls)
    return _SCANNED[cls]


def _scan(cls: type) -> tuple[ToolCall, ...]:
    found: list[ToolCall] = []
    for klass in plugin_classes(cls):
        try:
            lines, start = inspect.getsourcelines(klass)
            file = inspect.getsourcefile(klass) or "<unknown>"
            tree = ast.parse(textwrap.dedent("".join(lines)))
        except (OSError, TypeError, SyntaxError):
            continue
        found += _calls(tree, file, start - 1)
    return tuple(found)
