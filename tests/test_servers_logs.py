"""A managed server's log (SPEC §23): capped with its last lines kept, scrubbed of the
declared env values even when a value arrives split between two reads."""

from __future__ import annotations

import asyncio
from pathlib import Path

from genwire.providers.servers.logs import ServerLog, last_lines


def test_the_log_is_capped_and_keeps_its_last_lines(tmp_path: Path) -> None:
    log = ServerLog(tmp_path / "s.log", cap=1000)
    for i in range(300):
        log.write(f"line {i:04d}\n".encode())
    log.close()
    text = (tmp_path / "s.log").read_text()
    assert len(text.encode()) <= 1000 + 100  # the cap, plus the note that lines were cut
    assert text.splitlines()[0].startswith("[genwire: earlier lines cut")
    assert text.splitlines()[-1] == "line 0299" and "line 0000" not in text
    assert last_lines(tmp_path / "s.log", 2) == "line 0298\nline 0299"


async def test_a_secret_split_between_two_reads_never_reaches_the_file(tmp_path: Path) -> None:
    secret = "tok-0123456789abcdef"
    stream = asyncio.StreamReader()
    log = ServerLog(tmp_path / "s.log", secrets=[secret])
    copying = asyncio.create_task(log.copy(stream))
    stream.feed_data(f"starting with key {secret[:7]}".encode())
    await asyncio.sleep(0.05)  # the first half is read on its own
    stream.feed_data(f"{secret[7:]}\nready\n".encode())
    stream.feed_eof()
    await copying
    log.close()
    text = (tmp_path / "s.log").read_text()
    assert text == "starting with key ***\nready\n"
