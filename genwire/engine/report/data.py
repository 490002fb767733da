"""What a run's report shows, read from its checkpoint folder (SPEC §19): the metrics
every session appended (``engine.records.metrics``), the rows and failure records it kept, and
``meta.json``. Everything here is bounded whatever the number of rows: per-second
aggregates are binned to ``figures.MAX_POINTS`` points, samples and failure examples are capped
and long cells cut. Nothing here escapes text: ``report.html`` does, at the one place
text becomes HTML.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from genwire.engine.gates.costs import paid_by_column
from genwire.engine.records.metrics import METRICS_FILE
from genwire.engine.report.about import short_fingerprint
from genwire.engine.report.figures import FailureGroup, ModelTotals, Point, ReportData
from genwire.engine.report.funnel import read_funnel
from genwire.providers.metrics import BUCKETS

SAMPLE_ROWS = 12
SAMPLE_COLUMNS = 24
EXAMPLES_PER_CLASS = 3
MAX_CLASSES = 20
CELL_CHARS = 240
MESSAGE_CHARS = 400
_ROWS = re.compile(r"rows-(\d+)\.jsonl")
_FAILED = re.compile(r"failed-(\d+)\.jsonl")


def collect(
    directory: Path,
    output: Path,
    *,
    done: Callable[[int], bool] | None = None,
    counts: dict[str, Any] | None = None,
) -> ReportData:
    """The report of the run whose checkpoint is ``directory``. ``done`` says whether a
    row is kept (the live checkpoint knows; else the rows files are read); ``counts``
    (rows written, failed, resumed, requested) the session's own figures."""
    data = ReportData(output=str(output))
    _read_metrics(directory / METRICS_FILE, data)
    with contextlib.suppress(OSError, ValueError):
        meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
        data.rows_requested = int(meta["num_records"])
        data.fingerprint = meta.get("fingerprint")
        data.about.fingerprint = short_fingerprint(meta.get("fingerprint"))
    rows_files = _session_files(directory, _ROWS)
    if done is None:
        kept = _kept_indices(rows_files)
        done = kept.__contains__
        data.rows_written = len(kept)
        if rows_files:
            data.rows_resumed = len(_kept_indices(rows_files[:-1]))
    data.failures, failed = _failures(_session_files(directory, _FAILED), done)
    data.rows_failed = failed
    if counts:
        for name in ("rows_written", "rows_failed", "rows_resumed", "rows_requested"):
            if counts.get(name) is not None:
                setattr(data, name, counts[name])
    _read_cost(directory, data)
    data.about.column_tokens = paid_by_column(directory).tokens
    data.funnel = read_funnel(directory, data.columns, data.rows_written, data.rows_failed, data.summary)
    data.samples = list(islice(_merged_rows(rows_files), SAMPLE_ROWS))
    if not data.columns:
        seen: dict[str, None] = {}
        for _, row in data.samples:
            seen.update(dict.fromkeys(row))
        data.columns = list(seen)
    return data


def _read_cost(directory: Path, data: ReportData) -> None:
    """USD per alias (SPEC §16): a finished run's summary says it (local models at $0
    included), as does the ``end`` line of a session that ended otherwise (a priced model
    that was paid nothing at $0); a killed run's ledger says what was paid so far. An alias without a
    known price keeps no ``usd`` counter, so the page says ``unknown``, never 0."""
    from genwire.engine.records.ledger import LEDGER_NAME, read_totals

    cost = (data.summary or {}).get("cost") or data.ended_cost
    by_model = cost.get("by_model") if isinstance(cost, dict) else None
    usd: dict[str, Any]
    if isinstance(by_model, dict):
        usd = {alias: m.get("usd") for alias, m in by_model.items() if isinstance(m, dict)}
    else:
        usd = {alias: None if t.unpriced else t.usd for alias, t in read_totals(directory / LEDGER_NAME).items()}
    for alias, model in data.models.items():
        value = usd.get(alias)
        if isinstance(value, int | float):
            model.counters["usd"] = float(value)


def _read_metrics(path: Path, data: ReportData) -> None:
    offset = 0.0
    session: _Session | None = None
    bad = 0
    try:
        handle = path.open("rb")
    except OSError:
        data.notes.append("no metrics were recorded (the run wrote no metrics.jsonl)")
        return
    with handle:
        for line in handle:
            try:
                record = json.loads(line)
                kind = record["kind"]
                _check_shape(kind, record)
            except (ValueError, KeyError, TypeError):
                bad += 1  # a line torn by a kill, or not of the shape the run writes: the rest still counts
                continue
            if kind == "session":
                if session is not None:
                    offset += session.close(data)
                    data.boundaries.append(offset)
                session = _Session(float(record.get("t", 0.0)))
                data.sessions += 1
                if data.started is None:
                    data.started = session.start
                data.outcome, data.message, data.summary, data.ended_cost = "unfinished", "", None, None
                if isinstance(record.get("columns"), list):
                    data.columns = [str(c) for c in record["columns"]]
                if isinstance(record.get("models"), dict):
                    data.served.update({str(a): str(m) for a, m in record["models"].items()})
                data.about.read_session(record)
            elif kind == "tick" and session is not None:
                t = float(record["t"])
                session.end = max(session.end, t)
                _add_tick(data, record, offset + t - session.start)
            elif kind == "preflight":
                data.preflight = record.get("report")
                if session is not None:
                    session.saw_preflight(data.preflight)
            elif kind == "end":
                if session is not None:
                    session.end = max(session.end, float(record.get("t", session.end)))
                data.outcome = str(record.get("outcome", "unfinished"))
                data.message = str(record.get("message", ""))
                data.summary = record.get("summary")
                cost = record.get("cost")
                data.ended_cost = cost if isinstance(cost, dict) else None
                data.about.read_end(record)
    if session is not None:
        offset += session.close(data)
    data.active_s = offset
    if bad:
        data.notes.append(
            f"{bad} line(s) of {path.name} could not be read (a kill tears the last one) and were skipped"
        )


@dataclass
class _Session:
    """One session of the metrics file: its clock, split into its pre-flight and the time
    after it (none after a pre-flight that failed: nothing was generated)."""

    start: float
    end: float = -1.0
    preflight_s: float = 0.0
    preflight_failed: bool = False

    def __post_init__(self) -> None:
        self.end = self.start

    def saw_preflight(self, report: Any) -> None:
        if not isinstance(report, dict):
            return
        took = report.get("duration_s")
        if isinstance(took, int | float) and not isinstance(took, bool) and math.isfinite(took) and took >= 0:
            self.preflight_s = float(took)
        checks = report.get("checks")
        if isinstance(checks, list):
            self.preflight_failed = any(isinstance(c, dict) and c.get("status") == "failed" for c in checks)

    def close(self, data: ReportData) -> float:
        """Adds this session's pre-flight and generating time to ``data``; returns its length."""
        length = max(0.0, self.end - self.start)
        preflight = min(self.preflight_s, length)
        data.preflight_s += preflight
        if not self.preflight_failed:
            data.generating_s += length - preflight
        return length


def _number(value: Any, *, whole: bool = False) -> float:
    """A finite number (an int with ``whole``), else ValueError: NaN, a string, a bool."""
    if type(value) not in ((int,) if whole else (int, float)) or not math.isfinite(value):
        raise ValueError(f"not a finite number: {value!r}")
    return float(value)


def _counts(value: Any, *, buckets: bool = False) -> None:
    if not isinstance(value, dict):
        raise ValueError("counts are not an object")
    for key, n in value.items():
        _number(n, whole=True)
        if buckets and not (isinstance(key, str) and key.isdigit() and int(key) < BUCKETS):
            raise ValueError(f"not a latency bucket: {key!r}")


def _check_shape(kind: Any, record: Any) -> None:
    """ValueError unless ``record`` has the shape ``engine.records.metrics`` writes for ``kind``:
    a line of another shape (another version, a hand edit) is skipped like a torn one."""
    if not isinstance(record, dict):
        raise ValueError("not an object")
    if kind in ("session", "end") and "t" in record:
        _number(record["t"])
    if kind == "end" and record.get("summary") is not None and not isinstance(record["summary"], dict):
        raise ValueError("summary is not an object")
    if kind != "tick":
        return
    _number(record["t"])
    _number(record.get("dt", 1.0))
    rows = record.get("rows") or {}
    if not isinstance(rows, dict):
        raise ValueError("rows is not an object")
    for name in ("written", "failed"):
        _number(rows.get(name, 0), whole=True)
    models = record.get("models") or {}
    if not isinstance(models, dict):
        raise ValueError("models is not an object")
    for line in models.values():
        if not isinstance(line, dict):
            raise ValueError("a model's line is not an object")
        for name, value in line.items():
            if name in ("latency", "errors", "gave_up"):
                _counts(value, buckets=name == "latency")
            elif name in ("peak_in_flight", "in_flight"):
                _number(value, whole=True)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                _number(value)


def _add_tick(data: ReportData, record: dict[str, Any], x: float) -> None:
    rows = record.get("rows") or {}
    point = Point(x, float(record.get("dt", 1.0)), int(rows.get("written", 0)), int(rows.get("failed", 0)), {}, {}, {})
    for alias, line in (record.get("models") or {}).items():
        totals = data.models.setdefault(str(alias), ModelTotals())
        for name, value in line.items():
            if name in ("latency", "errors", "gave_up"):
                target = getattr(totals, name)
                for key, n in value.items():
                    key = int(key) if name == "latency" else str(key)
                    target[key] = target.get(key, 0) + int(n)
            elif name == "peak_in_flight":
                totals.peak_in_flight = max(totals.peak_in_flight, int(value))
            elif name not in ("in_flight", "sent", "answered") and isinstance(value, int | float):
                totals.counters[name] = totals.counters.get(name, 0) + value
        if line.get("requests"):
            point.requests[alias] = line["requests"]
        if line.get("rate_limited"):
            point.limited[alias] = line["rate_limited"]
        flying = max(int(line.get("peak_in_flight", 0)), int(line.get("in_flight", 0)))
        if flying:
            point.in_flight[alias] = flying
    data.points.append(point)


def _session_files(directory: Path, pattern: re.Pattern[str]) -> list[Path]:
    try:
        found = [(int(m.group(1)), p) for p in directory.iterdir() if (m := pattern.fullmatch(p.name))]
    except OSError:
        return []
    return [p for _, p in sorted(found)]


def _records(path: Path) -> Iterator[dict[str, Any]]:
    """The readable records of a checkpoint file (a damaged line is the run's business)."""
    with contextlib.suppress(OSError), path.open("rb") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


def _kept_indices(paths: list[Path]) -> set[int]:
    """The row indices the rows files hold: read from each line's head as the run writes
    it (``{"i": 12, "row": ...}``, no JSON parse of the row), else from its JSON."""
    kept: set[int] = set()
    for path in paths:
        with contextlib.suppress(OSError), path.open("rb") as handle:
            for line in handle:
                if line.startswith(b'{"i": ') and line.endswith(b"}\n"):
                    head = line[6 : line.find(b",", 6)]
                    if head.isdigit():
                        kept.add(int(head))
                        continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict) and type(record.get("i")) is int:
                    kept.add(record["i"])
    return kept


def _merged_rows(paths: list[Path]) -> Iterator[tuple[int, dict[str, Any]]]:
    streams = [
        ((r["i"], r["row"]) for r in _records(p) if type(r.get("i")) is int and isinstance(r.get("row"), dict))
        for p in paths
    ]
    last = -1
    for index, row in heapq.merge(*streams, key=lambda item: item[0]):
        if index != last:
            yield index, row
            last = index


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cell_text(value: Any) -> str:
    """A cell as short text: strings as they are, anything else as JSON; cut to ``CELL_CHARS``."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return cut(text, CELL_CHARS)


def _failures(paths: list[Path], done: Callable[[int], bool]) -> tuple[dict[str, FailureGroup], int]:
    """Rows that failed and are not kept (a later session may have made them), grouped by
    class, each with its latest record; examples capped, long texts cut."""
    latest: dict[int, tuple[str, dict[str, Any]]] = {}
    for path in paths:
        for record in _records(path):
            index = record.get("row")
            if type(index) is not int:
                continue
            data = record.get("data")
            if not isinstance(data, dict):
                data = {}
            example = {
                "row": index,
                "column": cut(str(record.get("column", "")), 120),
                "error": cut(str(record.get("error", "")), MESSAGE_CHARS),
                "data": {cut(str(k), 80): cell_text(v) for k, v in islice(data.items(), 8)},
            }
            latest[index] = (str(record.get("error_class", "unknown")), example)
    groups: dict[str, FailureGroup] = {}
    failed = 0
    for index in sorted(latest):
        if done(index):
            continue
        failed += 1
        error_class, example = latest[index]
        if error_class not in groups and len(groups) >= MAX_CLASSES:
            error_class = "other"
        group = groups.setdefault(error_class, FailureGroup())
        group.count += 1
        if len(group.examples) < EXAMPLES_PER_CLASS:
            group.examples.append(example)
    return dict(sorted(groups.items(), key=lambda item: -item[1].count)), failed
