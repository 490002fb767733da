"""Ends every process of a Ray instance genwire started, however genwire ends:
``python -I -S reaper.py MARK``, its stdin a pipe from genwire.

Standard library only, no site: it starts in milliseconds. genwire writes one line
``PID STARTTIME`` per process of the instance as it learns of them (the GCS, the raylet,
its agents, the workers); when the pipe closes — genwire closed it after ``ray.shutdown``,
or genwire died, kill -9 included, and the kernel closed it — the reaper SIGKILLs every
listed process still alive and each one's descendants, then exits. Ray's agents
(``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) ignore SIGTERM and outlive the raylet
otherwise. ``STARTTIME`` (``/proc/PID/stat``'s 22nd field) tells a listed process from a
later one that reuses its PID. Every process of the instance also carries ``MARK`` in its
environment (``GENWIRE_RAY_INSTANCE``, set while ``ray.init`` starts it: the raylet's workers
inherit it), and the reaper kills those too: a worker the raylet started after genwire last
listed the processes (one Ray restarted) is found even when it is no longer the raylet's
child (the raylet exits as soon as the driver dies, and its children are re-parented: such a
worker went on paying for about two seconds). It runs in a session of its own, so Ctrl-C on
the terminal reaches genwire, not it. Linux only (``/proc``): elsewhere genwire does not start it.

The driver's half (``processes``, ``start_time``) is imported by ``engine.cluster.instance``.
"""

import contextlib
import os
import signal
import sys

MARK_VARIABLE = "GENWIRE_RAY_INSTANCE"


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


def marked(mark: str) -> list[int]:
    """Every process whose environment carries ``MARK_VARIABLE=mark`` (this one and its parent aside)."""
    entry = f"{MARK_VARIABLE}={mark}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (os.getpid(), os.getppid()):  # never itself nor genwire
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                if entry in handle.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def _reap(listed: dict[int, int], mark: str | None) -> None:
    """SIGKILL the listed processes still alive (same start time), their descendants and
    every process carrying ``mark``."""
    doomed = [pid for pid, started in listed.items() if start_time(pid) == started]
    for pid in list(doomed):
        doomed.extend(processes(pid))  # collected before any is killed: orphans lose their parent
    if mark:
        doomed.extend(marked(mark))
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
    _reap(listed, sys.argv[1] if len(sys.argv) > 1 else None)


if __name__ == "__main__":
    main()
