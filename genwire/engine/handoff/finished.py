"""A finished run, as the hand-off reads it: its output file, its rejected file (a gated
run), and its run record. Anything else (a run still holding a checkpoint, an output no
run of this genwire wrote) is refused with what to do."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.engine.records.funnel import rejected_path
from genwire.engine.report.figures import ReportData
from genwire.engine.report.record import from_record, record_path
from genwire.errors import RunSetupError


@dataclass
class FinishedRun:
    output: Path
    data: ReportData  # the report's data, as the run recorded it
    version: str  # the genwire that made the run

    @property
    def rejected(self) -> Path | None:
        """The rejected candidates' file of a gated run (None: there is none)."""
        path = rejected_path(self.output)
        return path if path.is_file() else None

    @property
    def name(self) -> str:
        return str(self.data.about.card.get("title") or self.output.stem)


def finished_run(output: Path) -> FinishedRun:
    """The run that wrote ``output``, finished; ``RunSetupError`` (exit 2) naming what to do."""
    directory = checkpoint_dir(output)
    if (directory / "meta.json").exists():
        raise RunSetupError(
            f"the run writing {output} has not finished: its checkpoint {directory} holds its rows so far. "
            "Finish it first (rerun the same `genwire run` command: it resumes), then hand the dataset over"
        )
    record = record_path(output)
    if not output.is_file():
        raise RunSetupError(
            f"no dataset at {output}: give the output a finished `genwire run` wrote (its pipeline.output, "
            "or the -o it was given)"
        )
    try:
        data, version = from_record(json.loads(record.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise RunSetupError(
            f"{output} has no run record ({record.name} beside it): it was not written by a run of this genwire, "
            "or the record was removed. Rerun the pipeline (`genwire run`; the response cache pays for nothing "
            "already answered) to write it"
        ) from None
    except (OSError, ValueError) as exc:
        raise RunSetupError(f"cannot read the run record {record}: {exc}") from None
    if data.outcome != "completed":
        raise RunSetupError(
            f"the run writing {output} ended {data.outcome!r}, not completed ({record.name}); finish it (rerun the "
            "same `genwire run` command) before handing the dataset over"
        )
    return FinishedRun(output, data, version)
