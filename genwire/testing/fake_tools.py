"""``FakeTools``: an in-process stand-in for a tool server, for plugin tests and overrides
(``container.override("docs", FakeTools({"search": lambda args: "..."}))``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from genwire.providers.tools.handle import ToolResult, ToolSpec

Tool = Callable[[Mapping[str, Any]], str]


class FakeTools:
    """Each tool is a function of its arguments returning text; one that raises returns a
    tool error (``is_error``), as an MCP server reports it. Calls are recorded."""

    def __init__(self, tools: Mapping[str, Tool], *, name: str = "fake-tools") -> None:
        self._tools = dict(tools)
        self.name = name
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def list(self) -> list[ToolSpec]:
        schema = {"type": "object", "properties": {}, "additionalProperties": True}
        return [ToolSpec(name, fn.__doc__ or name, schema) for name, fn in self._tools.items()]

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        args = dict(arguments or {})
        self.calls.append((name, args))
        if name not in self._tools:
            raise KeyError(f"FakeTools has no tool {name!r} (tools: {', '.join(self._tools)})")
        try:
            return ToolResult(self._tools[name](args))
        except Exception as exc:  # a tool's failure is its result, as over MCP
            return ToolResult(str(exc), is_error=True)

    def __repr__(self) -> str:
        return f"FakeTools(tools={sorted(self._tools)})"
