"""What crosses the wire between the Ray driver and its workers: a worker's boot spec
(``WorkerSpec``), the roster sent with every block (``Roster``), a drain's contents
(``Drained``), a worker's error rebuilt on the driver (``RemoteError``), and how a Ray error's
text is read (``first_line``, ``last_line``). Plain picklable data: no Ray here.
"""

from __future__ import annotations

import dataclasses
import pickle
import re
import traceback
from pathlib import Path
from typing import Any

from genwire.config.loader import LoadedConfig
from genwire.engine.records.receipt import Receipt
from genwire.errors import RunError, exception_text
from genwire.generators.base import Generator
from genwire.providers.pricing import Price

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs to boot its container: plain data and class references."""

    loaded: LoadedConfig
    generators: dict[str, type[Generator[Any]]]
    response_cache: Path | None = None  # the driver's cache directory: a path every node sees
    prices: dict[str, Price | None] = dataclasses.field(default_factory=dict)  # the driver's, resolved once
    output_limits: dict[str, int] = dataclasses.field(default_factory=dict)  # the driver's: the same worst cases
    worker: int = 0  # this worker's index
    gates: Any = None  # the run's in-order gates' keeper (engine.cluster.keeper.KeeperClient), when it has any
    # The failure-rate stop judged as the worker's rows settle (engine.rows.failure_stop); None: not live.
    max_failure_rate: float | None = None


@dataclasses.dataclass(frozen=True)
class Roster:
    """What a worker learns once the driver's pre-flight passed, sent with every block: a
    worker Ray restarts (its process died: a new ``BlockWorker`` from the same
    ``WorkerSpec``) gets it again with the block it re-runs, before any request."""

    peers: list[Any] = dataclasses.field(default_factory=list)  # every worker's handle by index, the keeper's last
    verdicts: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # the driver's, on pools
    coordinator: Any = None  # the run's coordinator actor (engine.cluster.shared), when the budget is capped
    budget_caps: tuple[bool, bool] = (False, False)  # a cost cap, a token cap: spent in leases of the coordinator's
    learned: dict[str, Any] = dataclasses.field(default_factory=dict)  # what the probes showed (CostMeter.learned)


@dataclasses.dataclass(frozen=True)
class Drained:
    """What a worker settled since its last drain: answers for the cache and what it paid
    (the ledger's entries...), sent as they come, not with the block's rows, so a driver
    killed mid-block has them on disk. ``through``: the worker process and how many of its
    blocks had ended when it was taken (the driver checkpoints a block's rows only once a
    drain taken after the block's end is stored); ``number``: this drain's in that process
    (the driver's next drain call says it is stored: ``engine.cluster.holds``)."""

    answers: list[Any]
    receipt: Receipt
    through: tuple[str, int]
    number: int = 0


@dataclasses.dataclass(frozen=True)
class RemoteError:
    """An exception raised on a worker, rebuilt on the driver as the same type.

    Rebuilt without calling ``__init__`` (genwire's errors take other arguments than
    they store in ``args``), so type, message and attributes are exactly the worker's.
    """

    cls: type[BaseException]
    args: tuple[Any, ...]
    state: dict[str, Any]
    remote_traceback: str

    @classmethod
    def capture(cls, exc: BaseException) -> RemoteError:
        remote_tb = "".join(traceback.format_exception(exc))
        record = cls(type(exc), exc.args, dict(vars(exc)), remote_tb)
        try:
            pickle.dumps(record)
        except Exception:  # an unpicklable argument or a class only the worker can import
            message = f"a Ray worker raised {exception_text(exc)}"
            return cls(RunError, (message,), {}, remote_tb)
        return record

    def rebuild(self) -> BaseException:
        exc = self.cls.__new__(self.cls)
        exc.args = self.args
        vars(exc).update(self.state)
        exc.add_note(f"raised on a Ray worker:\n{self.remote_traceback}")
        return exc


def _lines(exc: BaseException) -> list[str]:
    text = _ANSI.sub("", str(exc))  # Ray colours its messages
    return [line.strip() for line in text.splitlines() if line.strip()] or [type(exc).__name__]


def first_line(exc: BaseException) -> str:
    return _lines(exc)[0]


def last_line(exc: BaseException) -> str:
    """The root cause, for Ray errors that end with the remote traceback's last line."""
    return _lines(exc)[-1]
