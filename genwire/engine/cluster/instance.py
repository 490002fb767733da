"""Ray for a run: joined or started quietly, and, when genwire started it, ended with
every one of its processes (SPEC §22).

* **Quiet.** Ray logs to the terminal as it starts ("SIGTERM handler is not set…",
  "Token authentication is enabled…"); without ``--debug`` its logger shows errors only
  and worker output never reaches the driver (``log_to_driver=False``).
* **Nothing outlives the instance.** A local instance genwire starts has no dashboard
  and is watched by a reaper process (``engine.cluster.reaper``) told the PID of every
  process of the instance (the driver's children born in ``ray.init`` and their
  descendants, noted again at every run's start; and, for a worker Ray started since, a
  mark every process of the instance inherits in its environment): at interpreter exit genwire shuts Ray
  down and closes the reaper's pipe, and the reaper SIGKILLs whatever is left (Ray's
  agents ignore SIGTERM and outlive the raylet); if genwire is killed (kill -9 too) the
  kernel closes the pipe and the reaper ends the instance at once, its workers with it,
  so none goes on paying for rows no one will keep. Linux only (``/proc``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
import uuid
from types import ModuleType
from typing import IO, Any

from genwire.engine.cluster import reaper as ray_reaper
from genwire.errors import RunError
from genwire.scrub import tracebacks_shown

__all__ = ["RayInstance", "ensure_ray", "started_instance"]

log = logging.getLogger("genwire.ray")

REAP_WAIT_S = 10.0  # at exit: how long genwire waits for the reaper to finish

_started: RayInstance | None = None


class RayInstance:
    """A local Ray genwire started: its processes, told to a reaper as they are learnt."""

    def __init__(self, roots: list[int], mark: str = "") -> None:
        self.roots = roots  # the driver's children ray.init started (GCS, raylet, monitors...)
        self.mark = mark  # in every process of the instance's environment (``reaper.MARK_VARIABLE``)
        self._told: set[int] = set()
        self._reaper: subprocess.Popen[bytes] | None = None
        if sys.platform.startswith("linux"):
            self._reaper = subprocess.Popen(
                [sys.executable, "-I", "-S", ray_reaper.__file__, mark],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches genwire, not the reaper
            )
        self.note()

    def pids(self) -> list[int]:
        """Every live process of the instance."""
        found = [pid for pid in self.roots if ray_reaper.start_time(pid) is not None]
        for root in self.roots:
            found.extend(ray_reaper.processes(root))
        if self.mark:
            found.extend(ray_reaper.marked(self.mark))
        return list(dict.fromkeys(found))

    def note(self) -> None:
        """Tell the reaper the instance's processes it does not know yet (workers start late)."""
        reaper = self._reaper
        if reaper is None or reaper.stdin is None:
            return
        lines = []
        for pid in self.pids():
            started = ray_reaper.start_time(pid)
            if pid not in self._told and started is not None:
                self._told.add(pid)
                lines.append(f"{pid} {started}\n")
        with contextlib.suppress(OSError):
            write(reaper.stdin, "".join(lines))

    def end(self, ray: ModuleType) -> None:
        """Ray shut down, then whatever of the instance is left killed by the reaper."""
        self.note()
        with contextlib.suppress(Exception):
            ray.shutdown()
        reaper, self._reaper = self._reaper, None
        if reaper is not None:
            with contextlib.suppress(OSError):
                assert reaper.stdin is not None
                reaper.stdin.close()  # the reaper's cue
            with contextlib.suppress(subprocess.TimeoutExpired):
                reaper.wait(REAP_WAIT_S)


def write(pipe: IO[bytes], text: str) -> None:
    if text:
        pipe.write(text.encode())
        pipe.flush()


def started_instance() -> RayInstance | None:
    """The local Ray this process started (None: none, or one it joined)."""
    return _started


def ensure_ray(ray: ModuleType, address: str | None, **options: object) -> None:
    """Join the Ray the caller started, else ``address`` (or Ray's own $RAY_ADDRESS),
    else start a local one, reaped at exit. ``options``: more of ``ray.init``'s."""
    global _started
    if ray.is_initialized():
        if _started is not None:
            _started.note()  # its workers of the last run, and any started since
        return
    before = set(ray_reaper.processes(os.getpid())) if sys.platform.startswith("linux") else set()
    # The processes ray.init starts inherit the mark, and the raylet's workers from them.
    mark = uuid.uuid4().hex
    unmarked = os.environ.get(ray_reaper.MARK_VARIABLE)
    os.environ[ray_reaper.MARK_VARIABLE] = mark
    try:
        quiet_ray(ray)
        ray.init(
            address=address,
            ignore_reinit_error=True,
            include_dashboard=False,
            log_to_driver=False,  # worker output would garble the progress bar
            logging_level=logging.DEBUG if tracebacks_shown() else logging.ERROR,
            **options,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise RunError(f"cannot start or join {where}: {exc}") from exc
    finally:
        if unmarked is None:
            del os.environ[ray_reaper.MARK_VARIABLE]
        else:
            os.environ[ray_reaper.MARK_VARIABLE] = unmarked
    if sys.platform.startswith("linux"):
        roots = [pid for pid in ray_reaper.processes(os.getpid()) if pid not in before]
        if roots:  # none: a cluster joined, not started
            _started = RayInstance(roots, mark)
            atexit.register(_end_at_exit, ray)  # after ray's own hook registered: runs before it


def end_ray(ray: ModuleType) -> None:
    """End the local Ray this process started, every process of it (a no-op otherwise)."""
    global _started
    instance, _started = _started, None
    if instance is not None:
        instance.end(ray)


def _end_at_exit(ray: ModuleType) -> None:
    end_ray(ray)


def quiet_ray(ray: ModuleType) -> None:
    """Ray's own logger shows errors only, and the raylet's messages that the driver prints
    ("Task … failed. There are 3 retries remaining…", raw colour codes and all, on stdout)
    go to genwire's debug log, unless ``--debug``."""
    debug = tracebacks_shown()
    logging.getLogger("ray").setLevel(logging.DEBUG if debug else logging.ERROR)
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    printer = getattr(worker, "print_to_stdstream", None)  # what Ray's error listener thread calls
    if debug or worker is None or printer is None or getattr(printer, "quiet", False):
        return

    def to_debug_log(data: dict[str, Any], ignore_prefix: bool = False) -> None:
        for line in data.get("lines", ()):
            log.debug("ray (%s): %s", data.get("pid"), line)

    to_debug_log.quiet = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = to_debug_log
