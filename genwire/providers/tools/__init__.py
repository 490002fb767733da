"""Tool servers (MCP, SPEC §18): what a ``ResourceKind.TOOLS`` slot is.

``handle.py`` is what a generator holds (``list()``, ``call()``, limited to ``allow``) and
the pre-flight's probe; ``server.py`` owns the MCP session and the server process (it
imports the ``mcp`` SDK, so it is loaded only when a config has tools); ``launcher.py``
starts a stdio server so that it dies with genwire and sees only its declared variables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from genwire.config.tools import HttpToolServerConfig, StdioToolServerConfig
    from genwire.providers.tools.handle import ToolServerBase


def make_tool_server(
    name: str, config: StdioToolServerConfig | HttpToolServerConfig, cwd: Path | None = None
) -> ToolServerBase:
    """The server client of ``tools.<name>`` (nothing starts until its first use); a stdio
    server runs in ``cwd`` (its ``cwd`` resolved against the config file's directory)."""
    try:
        from genwire.providers.tools.server import McpToolServer
    except ImportError as exc:  # validated at load; a half-installed SDK still gets a sentence
        if not (exc.name or "").startswith("mcp"):
            raise
        from genwire.errors import ConfigError

        # found at load (mcp_installed) but not importable: a broken or partial install
        raise ConfigError(
            f"tools.{name}: tool servers need the MCP SDK, which could not be imported ({exc}): "
            "pip install 'genwire[mcp]'"
        ) from None

    return McpToolServer(name, config, cwd)
