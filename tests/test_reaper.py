"""The reaper of a Ray instance genwire starts (``engine.cluster.reaper``), without Ray: when
genwire's pipe closes it kills every process carrying the instance's mark, listed or not,
whoever its parent is now (a worker Ray restarted after genwire last listed the processes,
re-parented when the raylet exited with the driver, went on paying for two seconds)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import wait_gone

from genwire.engine.cluster import reaper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reaper reads /proc (Linux)")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


def test_the_reaper_kills_every_marked_process_it_was_never_told_of_and_nothing_else() -> None:
    mark = "test-mark-" + os.urandom(6).hex()
    marked = subprocess.Popen(SLEEPER, env={**os.environ, reaper.MARK_VARIABLE: mark}, start_new_session=True)
    other = subprocess.Popen(SLEEPER, env={**os.environ, reaper.MARK_VARIABLE: "another-instance"})
    try:
        assert reaper.marked(mark) == [marked.pid]
        watcher = subprocess.Popen([sys.executable, "-I", "-S", reaper.__file__, mark], stdin=subprocess.PIPE)
        assert watcher.stdin is not None
        watcher.stdin.close()  # genwire gone: no process was ever listed
        assert watcher.wait(timeout=60) == 0
        assert wait_gone(marked.pid, timeout=60)
        assert other.poll() is None  # another instance's process is left alone
    finally:
        for process in (marked, other):
            process.kill()
            process.wait(timeout=60)
