"""The run record, ``<output>.run.json`` (SPEC §24): the report's data (``report.data``)
as JSON, written beside the report page every time the page is, so what a finished run
knew survives the removal of its checkpoint. ``genwire card``, ``export`` and ``push``
read it back into the same ``ReportData`` the page renders: one source, not a second
bookkeeping. Bounded like the page (aggregates, a few examples); no secret (the page's
sources hold none, and the pipeline text is scrubbed when recorded)."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from genwire.engine.report.about import RunAbout
from genwire.engine.report.figures import ModelTotals, ReportData
from genwire.engine.report.funnel import FunnelData, GateRejects

RECORD_VERSION = 1
_COPIED = (
    "output",
    "outcome",
    "message",
    "sessions",
    "active_s",
    "rows_requested",
    "rows_written",
    "rows_failed",
    "rows_resumed",
    "summary",
    "preflight",
    "columns",
    "served",
)


def record_path(output: Path) -> Path:
    return output.with_name(output.name + ".run.json")


def as_record(data: ReportData, version: str) -> dict[str, Any]:
    record: dict[str, Any] = {"version": RECORD_VERSION, "genwire": version}
    record.update({name: getattr(data, name) for name in _COPIED})
    record["models"] = {alias: asdict(m) for alias, m in data.models.items()}
    record["samples"] = [[i, row] for i, row in data.samples[:3]]
    record["funnel"] = asdict(data.funnel) if data.funnel is not None else None
    record["about"] = asdict(data.about)
    return record


def write_record(output: Path, data: ReportData, version: str) -> Path:
    target = record_path(output)
    temporary = target.with_name(target.name + ".tmp")
    try:
        text = json.dumps(as_record(data, version), ensure_ascii=False, default=str, indent=1)
        temporary.write_text(text + "\n", encoding="utf-8")
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    return target


def from_record(record: dict[str, Any]) -> tuple[ReportData, str]:
    """The report data a record holds and the genwire version that wrote it; ValueError
    (saying what) for a record of another shape."""
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
        raise ValueError(f"not a run record of format {RECORD_VERSION}")
    try:
        data = ReportData(output=str(record["output"]))
        for name in _COPIED[1:]:
            if record.get(name) is not None:
                setattr(data, name, record[name])
        data.models = {
            str(alias): ModelTotals(
                counters=dict(m.get("counters", {})),
                latency={int(k): int(v) for k, v in m.get("latency", {}).items()},
                errors=dict(m.get("errors", {})),
                gave_up=dict(m.get("gave_up", {})),
                peak_in_flight=int(m.get("peak_in_flight", 0)),
            )
            for alias, m in record.get("models", {}).items()
        }
        data.samples = [(int(i), dict(row)) for i, row in record.get("samples", [])]
        data.funnel = _funnel(record.get("funnel"))
        about = record.get("about") or {}
        known = {f.name for f in fields(RunAbout)}
        data.about = RunAbout(**{k: v for k, v in about.items() if k in known})
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"a run record of an unexpected shape ({exc})") from None
    return data, str(record.get("genwire", ""))


def _funnel(value: Any) -> FunnelData | None:
    if not isinstance(value, dict):
        return None
    return FunnelData(
        candidates=int(value["candidates"]),
        kept=int(value["kept"]),
        surplus=int(value["surplus"]),
        steps=[(str(g), int(n)) for g, n in value["steps"]],
        rejects={str(g): GateRejects(int(r["count"]), list(r["examples"])) for g, r in value["rejects"].items()},
        rejected_usd=value.get("rejected_usd"),
    )
