"""A server's log: its stdout and stderr, appended to ``<output>.servers/<name>.log``,
capped (the last lines kept), and its last lines read back for a failure's message."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

from genwire.scrub import scrub

CAP_BYTES = 50 * 1024 * 1024  # SPEC §23
TAIL_LINES = 20  # what a start_failed message shows
_LONG_LINE = 1 << 20  # a line longer than this is written (scrubbed) before its end comes


class ServerLog:
    """Appends to one file; past ``cap`` bytes the file is cut to its last half (at a line).
    What the server prints is scrubbed of ``secrets`` (its declared env values) line by line."""

    def __init__(self, path: Path, cap: int = CAP_BYTES, secrets: Iterable[str] = ()) -> None:
        self.path = path
        self.cap = cap
        self.secrets = list(secrets)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("ab")
        self._size = self._file.tell()

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._file.flush()
        self._size += len(data)
        if self._size > self.cap:
            self._trim()

    def _trim(self) -> None:
        self._file.close()
        with self.path.open("rb") as old:
            old.seek(max(0, self._size - self.cap // 2))
            kept = old.read()
        cut = kept.find(b"\n")
        kept = kept[cut + 1 :] if cut >= 0 else kept
        self.path.write_bytes(b"[genwire: earlier lines cut to keep this log under its cap]\n" + kept)
        self._file = self.path.open("ab")
        self._size = self._file.tell()

    def note(self, text: str) -> None:
        """A line of genwire's own (a start, a restart, a stop)."""
        self.write(f"[genwire] {text}\n".encode())

    def close(self) -> None:
        self._file.close()

    async def copy(self, stream: asyncio.StreamReader) -> None:
        """Copy ``stream`` (the server's output) into the log until it ends, whole lines
        scrubbed (a secret is never split between two writes; a line longer than
        ``_LONG_LINE`` is written in pieces)."""
        pending = b""
        while True:
            chunk = await stream.read(65536)
            if not chunk:
                if pending:
                    self.write(self._scrubbed(pending))
                return
            pending += chunk
            cut = pending.rfind(b"\n") + 1
            if cut == 0 and len(pending) > _LONG_LINE:
                cut = len(pending)
            if cut:
                self.write(self._scrubbed(pending[:cut]))
                pending = pending[cut:]

    def _scrubbed(self, data: bytes) -> bytes:
        if not self.secrets:
            return data
        return scrub(data.decode("utf-8", "replace"), self.secrets).encode()


def last_lines(path: Path, lines: int = TAIL_LINES, max_bytes: int = 65536) -> str:
    """The last ``lines`` lines of the log (read from at most its last ``max_bytes``)."""
    try:
        with path.open("rb") as file:
            file.seek(0, 2)
            size = file.tell()
            file.seek(max(0, size - max_bytes))
            data = file.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace").rstrip("\n")
    text = text[max(0, text.rfind("[genwire] starting ")) :]  # this start's lines only (the log is appended to)
    kept = [line for line in text.splitlines() if not line.startswith("[genwire] ")]
    return "\n".join(kept[-lines:])
