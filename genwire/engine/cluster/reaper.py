"""Ends every process of a Ray instance genwire started, however genwire ends:
``python -I -S reaper.py``, its stdin a pipe from genwire.

Standard library only, no site: it starts in milliseconds. genwire writes one line
``PID STARTTIME`` per process of the instance as it learns of them (the GCS, the raylet,
its agents, the workers); when the pipe closes — genwire closed it after ``ray.shutdown``,
or genwire died, kill -9 included, and the kernel closed it — the reaper SIGKILLs every
listed process still alive and each one's descendants, then exits. Ray's agents
(``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) ignore SIGTERM and outlive the raylet
otherwise. ``STARTTIME`` (``/proc/PID/stat``'s 22nd field) tells a listed process from a
later one that reuses its PID. It runs in a session of its own, so Ctrl-C on the terminal
reaches genwire, not it. Linux only (``/proc``): elsewhere genwire does not start it.

The driver's half (``processes``, ``start_time``) is imported by ``engine.cluster.instance``.
"""

import contextlib
import os
import signal
import sys


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None: gone, or not readable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()  # after the command name, which may hold spaces
    return int(fields[19])


def _parents() -> dict[int, int]:
    """Every process's parent, by PID."""
    found: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        found[int(name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return found


def processes(root: int) -> list[int]:
    """Every descendant of ``root`` (not ``root`` itself), parents before children."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop(0)
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _reap(listed: dict[int, int]) -> None:
    """SIGKILL the listed processes still alive (same start time) and their descendants."""
    doomed = [pid for pid, started in listed.items() if start_time(pid) == started]
    for pid in list(doomed):
        doomed.extend(processes(pid))  # collected before any is killed: orphans lose their parent
    for pid in dict.fromkeys(doomed):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    listed: dict[int, int] = {}
    for line in sys.stdin.buffer:  # until EOF: genwire closed the pipe or died
        with contextlib.suppress(ValueError):
            pid, started = (int(field) for field in line.split())
            listed[pid] = started
    _reap(listed)


if __name__ == "__main__":
    main()
