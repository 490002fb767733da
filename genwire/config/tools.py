"""``tools:`` in genwire.yaml (SPEC §18): MCP servers, declared like models.

A stdio server is a command genwire starts; an http server is a streamable-HTTP URL it
connects to. ``env`` values and ``headers`` values are secret strings: never printed,
logged, cached or repr'd.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr, field_validator

from genwire.config.strict import StrictValues
from genwire.config.validators import check_base_url, check_headers

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Tool names as MCP allows them (letters, digits, '_', '-', '.'), at most 128 characters.
ToolName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,128}$")]


def check_env(value: dict[str, SecretStr]) -> dict[str, SecretStr]:
    for name, secret in value.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"environment variable name {name!r} is not a valid name (letters, digits and '_')")
        if "\0" in secret.get_secret_value():
            raise ValueError(f"the value of environment variable {name!r} holds a NUL byte")
    return value


class _ToolServerBase(StrictValues):  # unknown keys are errors; values taken as written
    kind: Literal["mcp"]
    # What a generator may call (None: every tool the server lists).
    allow: list[ToolName] | None = None
    timeout_s: Annotated[float, Field(gt=0)] = 30.0  # per tool call
    # Starting (stdio) or connecting (http) and initialising; the pre-flight's per-check
    # timeout bounds it there too.
    start_timeout_s: Annotated[float, Field(gt=0)] = 60.0
    # A tool result larger than this fails its call as bad_response (memory stays bounded).
    max_result_mb: Annotated[float, Field(gt=0)] = 8.0
    health_check: bool = True

    @field_validator("allow")
    @classmethod
    def _unique(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            twice = sorted({n for n in value if value.count(n) > 1})
            if twice:
                raise ValueError(f"tool {twice[0]!r} is listed twice in allow")
        return value


class StdioToolServerConfig(_ToolServerBase):
    """A server genwire starts: ``command`` (a list: no shell), ``env``, ``cwd``. The
    process gets only ``env`` plus ``PATH``, never genwire's whole environment."""

    transport: Literal["stdio"]
    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    env: Annotated[dict[str, SecretStr], AfterValidator(check_env)] = Field(default_factory=dict)
    cwd: Annotated[str, Field(min_length=1)] | None = None

    def display(self) -> str:
        """What the plan shows: the command (env values never)."""
        return " ".join(self.command)


class HttpToolServerConfig(_ToolServerBase):
    """A streamable-HTTP MCP server at ``url``; ``headers`` are sent with every request."""

    transport: Literal["http"]
    url: Annotated[str, Field(pattern=r"^https?://\S+$"), AfterValidator(check_base_url)]
    headers: Annotated[dict[str, SecretStr], AfterValidator(check_headers)] = Field(default_factory=dict)

    def display(self) -> str:
        """What the plan shows: the URL without credentials or query."""
        from yarl import URL

        return str(URL(self.url).with_user(None).with_query(None))


ToolServerConfig = Annotated[StdioToolServerConfig | HttpToolServerConfig, Field(discriminator="transport")]
