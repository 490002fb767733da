"""The clients an OpenAI-compatible endpoint's requests go over: the lean ``WireClient`` of an
http:// endpoint it serves, else aiohttp's session (imported with the first request that needs
it); their life (opened on first use, bound to one event loop, closed by ``aclose``), the
same-origin rule for redirects, cookies, and a body read within ``max_response_mb``.

``HttpClients`` is the base of ``OpenAIProvider``: the provider's request loop
(``endpoint``) reads and swaps these clients on every attempt, so they share one object.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from yarl import URL  # light, and loaded with the config already (its base_url check)

from genwire.config.schema import OpenAIProviderConfig
from genwire.errors import ErrorClass
from genwire.providers.failures import AttemptFailure
from genwire.providers.openai.framing import aiohttp_framing, framed
from genwire.providers.wire import MalformedAnswer, WireClient, WireError, serves
from genwire.scrub import scrub
from genwire.version import __version__

if TYPE_CHECKING:  # aiohttp with the first request (a rerun the cache serves sends none)
    import aiohttp
    from aiohttp.client_middlewares import ClientHandlerType
    from multidict import CIMultiDictProxy

__all__ = ["MIN_SECRET_CHARS", "USER_AGENT", "HttpClients", "RedirectRefused"]

# Keys shorter than this are placeholders (vLLM's "1", "EMPTY", "none") that guard
# nothing; scrubbing them would mangle every message ("HTTP 40*** from http://***27.0...").
# Real keys (OpenAI, NVIDIA, Anthropic...) are 20+ characters.
MIN_SECRET_CHARS = 8
_MIB = 1 << 20
_READ_CHUNK = 1 << 16  # bytes taken from the socket at a time while reading a body
CONTENT_ENCODING = "Content-Encoding"  # a compressed body is bounded as it is inflated (_read_body)

# Sent by both clients (the lean one and aiohttp): one name whichever sends a request.
USER_AGENT = f"genwire/{__version__}"


class RedirectRefused(Exception):
    """A redirect to another origin (named): never followed with the provider's headers."""


class _NeverRaised(Exception):
    """Stands for aiohttp's errors until aiohttp is imported (no request was sent yet)."""


class HttpClients:
    """One endpoint's clients and their life; the base of ``OpenAIProvider``."""

    def __init__(self, config: OpenAIProviderConfig, *, lean_client: bool = True) -> None:
        """``lean_client=False``: aiohttp sends every request, an http:// endpoint's too (as
        it sends an https:// endpoint's)."""
        self.config = config  # api_key stays a SecretStr; unwrapped only for the header
        self.base_url = config.url.rstrip("/")
        # Shown in messages: never the userinfo part a base URL might carry.
        self._display_url = str(URL(self.base_url).with_user(None))
        self._max_body = int(config.max_response_mb * _MIB)  # bytes of an answer, at most
        self._session: aiohttp.ClientSession | None = None
        # The model requests of an http:// endpoint go over this lean client (issue 44: a
        # fast endpoint's speed is the client's CPU); opened and closed with the session.
        self._wire: WireClient | None = None
        self._aiohttp_only = False  # set once a redirect or a cookie made aiohttp take over
        self._lean = lean_client
        self._origin = URL(self.base_url).origin()  # where requests may go (no redirect elsewhere)
        # aiohttp's errors, known once it is imported (with the first session).
        self._invalid_url: type[BaseException] = _NeverRaised
        self._client_errors: tuple[type[BaseException], ...] = (OSError, WireError)
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- session lifecycle -------------------------------------------------------------

    @property
    def session(self) -> aiohttp.ClientSession | None:
        """aiohttp's session, or None before it is needed / after ``aclose``."""
        return self._session

    @property
    def client(self) -> WireClient | aiohttp.ClientSession | None:
        """What sends the requests (the lean client of an http:// endpoint it serves, else
        aiohttp's session), or None before the first request / after ``aclose``."""
        return self._wire or self._session

    def load_client_code(self) -> None:
        """Import the client code this endpoint's requests need (aiohttp: ~150 ms), so that a
        timed stage (the pre-flight) does not pay for it at its first request."""
        if not self._serves_lean(self._request_headers()):
            import aiohttp  # noqa: F401
        else:
            import httptools  # noqa: F401

    def _serves_lean(self, headers: Mapping[str, str]) -> bool:
        """Whether the lean client sends this endpoint's requests (else aiohttp does)."""
        return self._lean and not self._aiohttp_only and serves(self.base_url, headers)

    def _bound_here(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether this provider's clients may be used from ``loop``. A client is bound to
        its loop; reusing the provider from another loop is only safe once the old loop is
        gone (e.g. a container entered twice)."""
        if self._loop is loop:
            return True
        if self._loop is not None and self._loop.is_running() and (self._wire is not None or self._session is not None):
            raise RuntimeError(f"{self!r} is in use by another running event loop; call aclose() first")
        return False

    async def _ensure_client(self, loop: asyncio.AbstractEventLoop) -> None:
        """The lean client for an endpoint it serves, else aiohttp's session: an http://
        endpoint's run never imports aiohttp (~150 ms) unless it follows a redirect or
        keeps a cookie (issue 49)."""
        if not self._bound_here(loop):
            await self._discard_session()
        if self._wire is not None or (self._session is not None and not self._session.closed):
            return
        headers = self._request_headers()
        if self._serves_lean(headers):
            cfg = self.config
            self._wire = WireClient(self.base_url, headers, timeout_s=cfg.timeout_s, max_body=self._max_body)
            self._loop = loop
        else:
            self._open_session(loop)

    async def _ensure_session(self) -> aiohttp.ClientSession:
        """aiohttp's session (opened now if need be), bound to the running loop."""
        loop = asyncio.get_running_loop()
        if not self._bound_here(loop):
            await self._discard_session()
        session = self._session
        if session is not None and not session.closed:
            return session
        return self._open_session(loop)

    def _request_headers(self) -> dict[str, str]:
        """What every request carries, whichever client sends it: ours, then the configured
        ones (case-insensitive: a configured header replaces ours)."""
        from multidict import CIMultiDict

        cfg = self.config
        headers: CIMultiDict[str] = CIMultiDict(
            {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": USER_AGENT}
        )
        if cfg.api_key is not None:
            headers["Authorization"] = f"Bearer {cfg.api_key.get_secret_value()}"
        for name, value in cfg.headers.items():
            headers[name] = value.get_secret_value()
        return dict(headers.items())

    def _open_session(self, loop: asyncio.AbstractEventLoop) -> aiohttp.ClientSession:
        # Created synchronously (no await) so concurrent first calls cannot open two.
        import aiohttp  # here, not at the top: a run the response cache or the lean client serves never needs it

        self._invalid_url, self._client_errors = aiohttp.InvalidURL, (aiohttp.ClientError, OSError, WireError)
        cfg = self.config
        connector = aiohttp.TCPConnector(limit=cfg.max_concurrency, limit_per_host=cfg.max_concurrency)
        session = aiohttp.ClientSession(
            connector=connector,
            headers=self._request_headers(),
            timeout=aiohttp.ClientTimeout(total=cfg.timeout_s),
            raise_for_status=False,
            middlewares=(self._same_origin_only,),
        )
        self._session, self._loop = session, loop
        return session

    async def _same_origin_only(
        self, request: aiohttp.ClientRequest, handler: ClientHandlerType
    ) -> aiohttp.ClientResponse:
        """Every request aiohttp sends, redirects included: never to another host, which
        would receive the configured headers (aiohttp strips only Authorization)."""
        if request.url.origin() != self._origin:
            raise RedirectRefused(str(request.url.origin()))
        return await handler(request)

    async def _discard_session(self) -> None:
        session, wire = self._session, self._wire
        self._session, self._loop, self._wire = None, None, None
        self._aiohttp_only = False
        if wire is not None:
            wire.close()
        if session is not None and not session.closed:
            try:
                await session.close()
            except Exception:  # best effort: the session's old loop may be closed already
                session.detach()

    def _check_redirect(self, url: str, location: str) -> None:
        """Raise ``RedirectRefused`` for a redirect to another origin (``MalformedAnswer``
        for a Location that is not a URL)."""
        try:
            target = URL(url).join(URL(location)).origin()
        except ValueError as exc:
            raise MalformedAnswer(f"a redirect to {location[:80]!r}, not a URL ({exc})") from None
        if target != self._origin:
            raise RedirectRefused(str(target))

    def _keep_cookies(self, session: aiohttp.ClientSession, url: str, headers: CIMultiDictProxy[str]) -> None:
        """An answer that sets cookies: into aiohttp's jar, as aiohttp would have kept them.
        If the jar keeps any (it refuses those of an IP address), later requests go over
        aiohttp, which sends them back (a load balancer's sticky session)."""
        from http.cookies import CookieError, SimpleCookie

        cookies: SimpleCookie = SimpleCookie()
        for header in headers.getall("Set-Cookie"):
            with contextlib.suppress(CookieError):
                cookies.load(header)
        session.cookie_jar.update_cookies(cookies, URL(url))
        if len(session.cookie_jar):
            self._leave_wire()

    def _leave_wire(self) -> None:
        """aiohttp sends the provider's requests from now on (the lean client's in flight finish)."""
        if self._wire is not None:
            self._wire.close_idle()
            self._wire = None

    async def _exchange(
        self, session: aiohttp.ClientSession, url: str, body: bytes
    ) -> tuple[int, Mapping[str, str], bytes]:
        """One POST over aiohttp: status, headers, the body read whole (``_read_body``).
        An answer aiohttp's parser (llhttp) refuses is a ``MalformedAnswer``, as the lean
        client's are (``aiohttp_framing``); a connection refused, reset or cut short is not."""
        try:
            async with session.post(url, data=body) as resp:
                declared = resp.content_length
                if declared is not None and declared <= self._max_body and CONTENT_ENCODING not in resp.headers:
                    # A plain body of a declared length within the limit: read whole at once.
                    return resp.status, resp.headers, await resp.read()
                return resp.status, resp.headers, await framed(resp, self._read_body(resp, url))
        except self._client_errors as exc:
            refused = aiohttp_framing(exc)
            if refused is None:
                raise
            raise MalformedAnswer(f"{refused} (aiohttp)") from None

    async def _read_body(self, resp: aiohttp.ClientResponse, url: str) -> bytes:
        """The body, read in chunks up to ``max_response_mb``: past it (or with a larger
        Content-Length) the request fails and the connection is dropped unread, so what a
        broken server sends never costs more memory than the limit."""
        limit = self._max_body
        declared = resp.content_length
        if declared is None or declared <= limit:
            body = bytearray()
            # aiohttp pauses the socket while its own buffer is full, so only the chunk in
            # hand and ``body`` hold memory; a gzip body is counted as it is inflated.
            async for chunk in resp.content.iter_chunked(_READ_CHUNK):
                body += chunk
                if len(body) > limit:
                    break
            else:
                return bytes(body)
        resp.close()  # not released to the pool: the rest of the body is never read
        raise self._too_large(resp.status, url)

    def _too_large(self, status: int, url: str) -> AttemptFailure:
        return AttemptFailure(
            ErrorClass.BAD_RESPONSE,
            f"HTTP {status} from POST {self._where(url)} with a body larger than "
            f"{self.config.max_response_mb:g} MB (max_response_mb); raise the provider's max_response_mb "
            "if such an answer is legitimate",
            retry=False,
            retry_after=None,
        )

    # --- message hygiene ---------------------------------------------------------------

    def _where(self, url: str) -> str:
        return self._display_url + url[len(self.base_url) :]

    def _scrub(self, text: str) -> str:
        """Remove the API key and header values from any text that might echo them
        (bodies, exception text)."""
        secrets = [*self.config.headers.values()]
        if self.config.api_key is not None:
            secrets.append(self.config.api_key)
        return scrub(text, [s.get_secret_value() for s in secrets], MIN_SECRET_CHARS)
