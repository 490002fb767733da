"""What a generator holds for a ``ResourceKind.TOOLS`` slot, and the pre-flight's probe.

A handle serves only its own server and only the tools of its ``allow`` list (SPEC §18).
Like a model handle (``providers.routes``) it holds no reference to the server object
(which owns the session, the process and the secrets of its environment), only an
unguessable route token that genwire's code resolves.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from genwire.errors import ErrorClass, UndeclaredToolError, plural
from genwire.providers.request_context import current_column
from genwire.providers.routes import Route, open_route, resolve_route

if TYPE_CHECKING:
    from genwire.config.tools import HttpToolServerConfig, StdioToolServerConfig
    from genwire.providers.probes import ProbeRequest, ProbeResult


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the server lists it."""

    name: str
    description: str
    input_schema: Mapping[str, Any] = field(default_factory=dict)

    def openai(self) -> dict[str, Any]:
        """The tool as an OpenAI ``tools`` entry."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": dict(self.input_schema)},
        }


@dataclass(frozen=True)
class ListedTools:
    """In a request shape (``Generator.request_shape``): the tools the server bound to
    ``slot`` offers, as OpenAI ``tools``. The pre-flight lists that server (``server``, set
    from the column's wiring) and probes the model with exactly those tools and schemas:
    what the run sends."""

    slot: str
    server: str | None = None


@dataclass(frozen=True)
class ToolResult:
    """A tool's answer: its text content joined, whether the tool reported an error, and
    its structured content when it gave one."""

    text: str
    is_error: bool = False
    structured: Any = None


class ToolServerBase:
    """A tool server client (``server.McpToolServer``): one per ``tools.<name>``, shared by
    every column bound to it."""

    name: str
    config: StdioToolServerConfig | HttpToolServerConfig

    def __init__(self, name: str, config: StdioToolServerConfig | HttpToolServerConfig) -> None:
        self.name = name
        self.config = config
        self._routes: list[Route[ToolServerBase]] = []

    def handle(self) -> ToolsHandle:
        allow = self.config.allow
        return ToolsHandle(open_route(self, self.name, "", self._routes), self.name, allow)

    async def listing(self) -> dict[str, ToolSpec]:
        """Every tool the server lists (started or connected on first use)."""
        raise NotImplementedError

    async def invoke(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError


class ToolsHandle:
    """``await tools.list()`` (the allowed tools) and ``await tools.call(name, arguments)``."""

    __slots__ = ("_allow", "_token", "name")
    _allow: frozenset[str] | None
    _token: int
    name: str

    def __init__(self, token: int, name: str, allow: list[str] | None) -> None:
        object.__setattr__(self, "_token", token)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_allow", frozenset(allow) if allow is not None else None)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")

    def __repr__(self) -> str:
        return f"ToolsHandle(server={self.name!r})"

    async def list(self) -> list[ToolSpec]:
        """The tools this handle may call, with their JSON input schemas."""
        listed = await _server(self._token).listing()
        # Copies: the listing is shared by every column of the server; no plugin changes another's.
        return [copy.deepcopy(spec) for name, spec in listed.items() if self._allow is None or name in self._allow]

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolResult:
        """Call tool ``name``. A tool outside ``allow`` (or that the server lacks) raises
        ``UndeclaredToolError``; a failed call raises ``ModelError`` with its class; a tool
        that reports an error returns a result with ``is_error`` true."""
        server = _server(self._token)
        if self._allow is not None and name not in self._allow:
            raise UndeclaredToolError(self.name, current_column(), name, sorted(self._allow), listed=True)
        listed = await server.listing()
        if name not in listed:
            offered = [n for n in listed if self._allow is None or n in self._allow]
            raise UndeclaredToolError(self.name, current_column(), name, offered, listed=False)
        return await server.invoke(name, MappingProxyType(dict(arguments or {})))


def _server(token: int) -> ToolServerBase:
    route: Route[ToolServerBase] = resolve_route(token, ToolServerBase)
    return route.provider


def make_tools_handle(server: ToolServerBase) -> ToolsHandle:
    return server.handle()


async def probe_tools(handle: ToolsHandle, request: ProbeRequest) -> ProbeResult:
    """Start or connect, initialise and list; every allowed tool must be listed with a
    valid JSON Schema (type object) as its input schema."""
    from genwire.providers.probes import ProbeFailure, ProbeResult

    if not isinstance(handle, ToolsHandle):  # an override: a fake offers list() only
        specs = await handle.list()
        return ProbeResult(plural(len(specs), "tool"))
    server = _server(object.__getattribute__(handle, "_token"))
    listed = await server.listing()
    allow = server.config.allow
    wanted = list(allow) if allow is not None else list(listed)
    missing = [n for n in wanted if n not in listed]
    if missing:
        raise ProbeFailure(
            ErrorClass.NOT_FOUND,
            f"the server does not offer allowed tool(s) {', '.join(map(repr, missing))} "
            f"(it lists: {', '.join(sorted(listed)) or 'none'}); fix tools.{server.name}.allow",
        )
    bad = [f"{n!r}: {problem}" for n in wanted if (problem := schema_problem(listed[n].input_schema))]
    if bad:
        raise ProbeFailure(ErrorClass.BAD_RESPONSE, f"invalid input schema: {'; '.join(bad)}")
    return ProbeResult(f"{plural(len(wanted), 'tool')}: {', '.join(wanted)}")


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a usable tool input schema (a JSON Schema of type object)."""
    if not isinstance(schema, Mapping):
        return "not a JSON object"
    if schema.get("type") != "object":
        return f"type is {schema.get('type')!r}, not 'object'"
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(dict(schema))
    except SchemaError as exc:
        return f"not a valid JSON Schema: {exc.message}"
    return None
