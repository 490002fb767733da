"""Start a stdio MCP server so that it cannot outlive genwire: ``python -I -S launcher.py
PARENT_PID KEEP -- COMMAND...``.

Run by genwire (standard library only, no site: it starts in milliseconds). On Linux it
asks the kernel to SIGKILL this process when its parent dies (``PR_SET_PDEATHSIG``, kept
across ``exec``), checks the parent did not die before that, keeps only the variables
named in KEEP (comma-separated) plus ``PATH``, and replaces itself with COMMAND, which
thus has the launcher's PID. Elsewhere the server still gets EOF on its stdin when genwire
dies (the MCP stdio transport ends on it).
"""

import os
import sys

PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        sys.stderr.write("genwire tool launcher: prctl(PR_SET_PDEATHSIG) failed\n")
        os._exit(126)
    if os.getppid() != parent:  # genwire died before the request took effect
        os._exit(0)


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: launcher.py PARENT_PID KEEP -- COMMAND...\n")
        os._exit(2)
    parent, keep, command = int(argv[0]), argv[1], argv[3:]
    _die_with_parent(parent)
    names = {n for n in keep.split(",") if n} | {"PATH"}
    env = {n: os.environ[n] for n in names if n in os.environ}
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        sys.stderr.write(f"cannot run {command[0]!r}: {exc.strerror or exc}\n")
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
