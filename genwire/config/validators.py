"""Checks of values that several config models share (a base URL, HTTP headers): one
place, imported by ``schema``, ``tools`` and ``data_designer`` alike."""

from __future__ import annotations

import re

from pydantic import SecretStr

from genwire.scrub import without_userinfo

__all__ = ["check_api_key", "check_base_url", "check_headers", "sendable_value_problem"]


def check_base_url(value: str) -> str:
    """Refuse here what would otherwise crash the first request (bad port, broken IPv6)."""
    from yarl import URL  # aiohttp's URL type: what the client will parse it with

    shown = without_userinfo(value)  # a message never shows the URL's password
    try:
        url = URL(value)
        url.port  # noqa: B018  # parsing the port is what fails for "h:99999" or "h:abc"
    except ValueError as exc:
        reason = without_userinfo(str(exc).removeprefix("Invalid URL: ")).replace(value, shown)
        raise ValueError(f"got {shown!r}: {reason}") from None
    if not url.host:
        raise ValueError(f"got {shown!r}: the URL has no host")
    return value


_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)


def sendable_value_problem(value: str) -> str | None:
    """What keeps ``value`` from being sent as an HTTP header value, or None. A line break
    or NUL would end the header (or smuggle another); HTTP/1.1 clients encode values as
    Latin-1, so any other character fails every request."""
    if any(ch in value for ch in "\r\n\0"):
        return "holds a line break or NUL"
    try:
        value.encode("latin-1")
    except UnicodeEncodeError as exc:
        return f"holds a character that is not Latin-1 (at position {exc.start})"
    return None


def check_headers(value: dict[str, SecretStr]) -> dict[str, SecretStr]:
    """Names that are HTTP tokens and values that can be sent (values are not shown: a
    header may carry a credential)."""
    for name, header in value.items():
        if not _HEADER_NAME.match(name):
            raise ValueError(f"header name {name!r} is not a valid HTTP header name")
        problem = sendable_value_problem(header.get_secret_value())
        if problem:
            raise ValueError(f"the value of header {name!r} {problem}")
    return value


def check_api_key(value: SecretStr | None) -> SecretStr | None:
    """An API key that can be sent as ``Authorization: Bearer <key>`` (never shown)."""
    if value is not None:
        problem = sendable_value_problem(value.get_secret_value())
        if problem:
            raise ValueError(f"the api_key {problem} (its value is not shown)")
    return value
