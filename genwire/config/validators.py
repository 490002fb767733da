"""Checks of values that several config models share (a base URL, HTTP headers): one
place, imported by ``schema``, ``tools`` and ``data_designer`` alike."""

from __future__ import annotations

import re

from pydantic import SecretStr

from genwire.scrub import without_userinfo

__all__ = ["check_base_url", "check_headers"]


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


def check_headers(value: dict[str, SecretStr]) -> dict[str, SecretStr]:
    """Names that are HTTP tokens and values without line breaks (values are not shown:
    a header may carry a credential)."""
    for name, header in value.items():
        if not _HEADER_NAME.match(name):
            raise ValueError(f"header name {name!r} is not a valid HTTP header name")
        if any(ch in header.get_secret_value() for ch in "\r\n\0"):
            raise ValueError(f"the value of header {name!r} holds a line break or NUL")
    return value
