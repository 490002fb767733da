"""Start a server (a stdio MCP server, an inference server) so that neither it nor any
process it starts outlives genwire: ``python -I -S launcher.py PARENT_PID KEEP [GRACE] --
COMMAND...``.

Run by genwire (standard library only, no site: it starts in milliseconds) as the leader
of a process group of its own (``start_new_session``). It keeps only the variables named in
KEEP (comma-separated) plus ``PATH``, forks COMMAND (the server) into its group, and stays
as the group's reaper: when the server exits, when it is asked to stop (SIGTERM, SIGHUP)
and when genwire dies (on Linux the kernel tells it: ``PR_SET_PDEATHSIG``; elsewhere it
polls its parent), it SIGKILLs the whole group: the server and every child of it (``bash
-c "sleep 300 & exec server"``), itself last. It ignores Ctrl-C: genwire decides when its
servers stop. ``kill_group`` is the same ending from genwire's side.

With GRACE (seconds, an inference server's ``stop_timeout_s``) a stop is graceful: the
group gets SIGTERM first (vLLM frees its GPU memory on it), and SIGKILL once the server has
exited or GRACE has passed, whichever comes first. A server that exits on its own still
takes its group with it at once.

The reaper closes its copy of the server's stdin and stdout, so genwire still sees EOF
when the server goes, and the server sees EOF when genwire closes its end.
"""

import contextlib
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PARENT_POLL_S = 0.5  # without PR_SET_PDEATHSIG: how often the reaper looks for its parent


def command(parent: int, keep: list[str], server: list[str], grace_s: float = 0.0) -> list[str]:
    """The argv that starts ``server`` under a reaper (run it with ``start_new_session``);
    ``grace_s`` > 0: a stop sends SIGTERM and waits that long before SIGKILL."""
    grace = [repr(float(grace_s))] if grace_s > 0 else []
    return [sys.executable, "-I", "-S", __file__, str(parent), ",".join(keep), *grace, "--", *server]


def stop_group(leader: int) -> None:
    """Ask the reaper ``leader`` to stop its group (gracefully when it was given a GRACE)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(leader, signal.SIGTERM)


def kill_group(leader: int) -> None:
    """SIGKILL the group of the reaper ``leader`` (its server and every child of it): at once."""
    # Gone already (ESRCH), or not ours to signal (EPERM): nothing to kill.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, signal.SIGKILL)


def _end_group(*_: object) -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)  # this process included: the last thing it does


class _Stop(Exception):
    """A graceful stop was asked for (SIGTERM, SIGHUP, the parent's death)."""


def _ask_stop(*_: object) -> None:
    raise _Stop


def _graceful_end(child: int, grace_s: float) -> None:
    """SIGTERM the group (not this process), wait for the server up to ``grace_s``, end it."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgrp(), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(child, os.WNOHANG)
        except ChildProcessError:
            break
        if done:
            break
        time.sleep(0.05)
    _end_group()


def _tell_on_parent_death(signum: int) -> bool:
    """Ask the kernel to send ``signum`` when the parent dies (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
        sys.stderr.write("genwire tool launcher: prctl(PR_SET_PDEATHSIG) failed\n")
        os._exit(126)
    return True


def _serve(command: list[str], keep: str) -> None:
    """In the forked child: become the server."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    _tell_on_parent_death(signal.SIGKILL)  # the reaper killed by hand: its server goes too
    names = {n for n in keep.split(",") if n} | {"PATH"}
    env = {n: os.environ[n] for n in names if n in os.environ}
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        sys.stderr.write(f"cannot run {command[0]!r}: {exc.strerror or exc}\n")
        os._exit(127)


def _reap(child: int, parent: int, told: bool, grace_s: float) -> None:
    """Wait for the server (or genwire's death, or a stop), then end the group."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # the pipes belong to genwire and the server alone
    os.dup2(null, 1)
    try:
        while True:
            try:
                done, status = os.waitpid(child, 0 if told else os.WNOHANG)
            except ChildProcessError:
                break
            if done:
                if grace_s > 0:  # an inference server's log says how it ended (its code is lost with the group)
                    code = os.waitstatus_to_exitcode(status)
                    os.write(2, f"[genwire] the server exited with code {code}\n".encode())
                break
            if os.getppid() != parent:
                raise _Stop
            time.sleep(PARENT_POLL_S)
    except _Stop:
        _graceful_end(child, grace_s)
    _end_group()


def main(argv: list[str]) -> None:
    graceful = len(argv) >= 5 and argv[3] == "--"
    if not graceful and (len(argv) < 4 or argv[2] != "--"):
        sys.stderr.write("usage: launcher.py PARENT_PID KEEP [GRACE] -- COMMAND...\n")
        os._exit(2)
    parent, keep = int(argv[0]), argv[1]
    grace_s, server = (float(argv[2]), argv[4:]) if graceful else (0.0, argv[3:])
    if os.getpgrp() != os.getpid():
        os.setsid()  # started without a group of its own: make one
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _ask_stop if graceful else _end_group)
    told = _tell_on_parent_death(signal.SIGTERM)
    if os.getppid() != parent:  # genwire died before the request took effect
        os._exit(0)
    child = os.fork()
    if child == 0:
        _serve(server, keep)
    _reap(child, parent, told, grace_s)


if __name__ == "__main__":
    main(sys.argv[1:])
