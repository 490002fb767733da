"""A real headless Chromium driven over the DevTools protocol, for the report page's tests.

``open_page(path)`` starts Chromium (Debian's ``chromium``; ``CHROMIUM`` names another)
with ``--remote-debugging-port=0``, connects to its page with aiohttp's websocket client,
records every console message, uncaught exception, log entry and network request, loads
the file, reads values back from the DOM and takes a full-page screenshot at 1280 px.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH = 1280


def find_chromium() -> str | None:
    named = os.environ.get("CHROMIUM")
    if named:
        return shutil.which(named) or (named if Path(named).exists() else None)
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


NO_CHROMIUM = (
    "no Chromium found (looked for chromium, chromium-browser, google-chrome on PATH, or $CHROMIUM): "
    "the report page's browser tests need one; scripts/test.sh installs Debian's chromium"
)


@dataclass
class PageVisit:
    """What loading the page did and what it shows."""

    url: str
    console: list[str] = field(default_factory=list)  # console messages of level error/warning, exceptions
    requests: list[str] = field(default_factory=list)  # every URL the page asked for, its own included
    dom: Any = None  # what the probe script returned
    screenshot: bytes = b""

    @property
    def foreign_requests(self) -> list[str]:
        return [u for u in self.requests if u != self.url]


class _Session:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse, visit: PageVisit) -> None:
        self.ws = ws
        self.visit = visit
        self.next_id = 0
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.loaded = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    async def call(self, method: str, **params: Any) -> Any:
        self.next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[self.next_id] = future
        await self.ws.send_str(json.dumps({"id": self.next_id, "method": method, "params": params}))
        return await asyncio.wait_for(future, 60)

    async def _read(self) -> None:
        async for message in self.ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(message.data)
            if "id" in data:
                future = self.waiting.pop(data["id"], None)
                if future is not None and not future.done():
                    if "error" in data:
                        future.set_exception(RuntimeError(f"DevTools error: {data['error']}"))
                    else:
                        future.set_result(data.get("result"))
                continue
            self._event(data.get("method", ""), data.get("params", {}))

    def _event(self, method: str, params: dict[str, Any]) -> None:
        visit = self.visit
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
            visit.console.append(f"console.{params['type']}: {params.get('args')}")
        elif method == "Runtime.exceptionThrown":
            visit.console.append(f"exception: {params.get('exceptionDetails')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
            entry = params["entry"]
            visit.console.append(f"log.{entry.get('level')}: {entry.get('text')} {entry.get('url', '')}")
        elif method == "Network.requestWillBeSent":
            visit.requests.append(params["request"]["url"])
        elif method == "Page.loadEventFired":
            self.loaded.set()


async def _visit(chromium: str, path: Path, probe: str) -> PageVisit:
    url = path.resolve().as_uri()
    visit = PageVisit(url)
    # Cleaned up by hand: Chromium's helpers may still be writing to the profile for a moment.
    with tempfile.TemporaryDirectory(prefix="genwire-chromium-", ignore_cleanup_errors=True) as profile:
        log = Path(profile) / "chromium.log"
        with log.open("wb") as log_file:
            process = subprocess.Popen(
                [
                    chromium,
                    "--headless",
                    "--no-sandbox",  # root in CI containers
                    "--disable-gpu",
                    "--no-first-run",
                    "--no-default-browser-check",
                    "--disable-background-networking",  # the browser's own calls are not the page's
                    "--disable-component-update",
                    "--disable-sync",
                    "--hide-scrollbars",
                    f"--user-data-dir={profile}",
                    "--remote-debugging-port=0",
                    f"--window-size={WIDTH},900",
                    "about:blank",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log_file,
                start_new_session=True,  # its renderers and helpers in one group, killed together
            )
        try:
            port = await asyncio.wait_for(asyncio.to_thread(_devtools_port, process, log), 60)
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/json/list") as response:
                    targets = await response.json(content_type=None)
                page = next(t for t in targets if t.get("type") == "page")
                async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    session = _Session(ws, visit)
                    for domain in ("Runtime", "Log", "Network", "Page"):
                        await session.call(f"{domain}.enable")
                    await session.call(
                        "Emulation.setDeviceMetricsOverride", width=WIDTH, height=900, deviceScaleFactor=1, mobile=False
                    )
                    session.loaded.clear()
                    await session.call("Page.navigate", url=url)
                    await asyncio.wait_for(session.loaded.wait(), 60)
                    await asyncio.sleep(0.2)  # late console messages (a CSP report) arrive after load
                    result = await session.call("Runtime.evaluate", expression=probe, returnByValue=True)
                    visit.dom = result["result"].get("value")
                    shot = await session.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
                    visit.screenshot = base64.b64decode(shot["data"])
                    session.reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await session.reader
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
            _remove(Path(profile))
    return visit


def _remove(profile: Path) -> None:
    """The profile, once the killed helpers have let go of it (a few tries)."""
    for _ in range(50):
        shutil.rmtree(profile, ignore_errors=True)
        if not profile.exists():
            return
        time.sleep(0.1)


def _devtools_port(process: subprocess.Popen[bytes], log: Path) -> int:
    """The port Chromium says it listens on (in its stderr, a file: no pipe to keep drained)."""
    while process.poll() is None:
        match = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", log.read_text(errors="replace"))
        if match:
            return int(match.group(1))
        time.sleep(0.05)
    raise RuntimeError(f"Chromium exited ({process.returncode}) without a DevTools port: {log.read_text()[-2000:]}")


def open_page(chromium: str, path: Path, probe: str) -> PageVisit:
    """Load ``path`` in headless Chromium; ``probe`` (a JS expression) reads the DOM."""
    return asyncio.run(_visit(chromium, path, probe))
