"""The report page from metrics it did not expect (issue 41 item 21): a line of the wrong
shape is skipped with a warning like a torn one; a run shorter than one tick still draws
its plots; a latency histogram whose every request falls in one decade has a labelled
x axis."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.engine.records.metrics import METRICS_FILE
from genwire.engine.report import write_report
from genwire.engine.report.svg import latency_histogram, time_chart
from genwire.providers.metrics import latency_bucket

GOOD_TICK = {
    "kind": "tick",
    "session": 1,
    "t": 101.0,
    "dt": 1.0,
    "rows": {"written": 2, "failed": 0},
    "models": {"writer": {"requests": 2, "answered": 2, "latency": {str(latency_bucket(0.2)): 2}}},
}


def report_of(tmp_path: Path, lines: list[str]) -> str:
    output = tmp_path / "out.jsonl"
    directory = checkpoint_dir(output)
    directory.mkdir()
    session = json.dumps({"kind": "session", "session": 1, "t": 100.0, "columns": ["a"]})
    (directory / METRICS_FILE).write_text("\n".join([session, *lines, json.dumps(GOOD_TICK)]) + "\n", "utf-8")
    return write_report(output).read_text(encoding="utf-8")


def with_(**changes: Any) -> str:
    return json.dumps({**GOOD_TICK, **changes})


@pytest.mark.parametrize(
    "line",
    [
        json.dumps({k: v for k, v in GOOD_TICK.items() if k != "t"}),  # a tick without t
        with_(rows=[1, 2]),
        with_(rows={"written": "many"}),
        with_(models={"writer": {"latency": {"abc": 1}}}),
        with_(models={"writer": {"latency": {"9999": 1}}}),
        with_(models={"writer": {"errors": [1]}}),
        with_(models={"writer": {"peak_in_flight": "x"}}),
        with_(models=[1]),
        with_(models={"writer": 3}),
        with_(t=float("nan")),
        with_(dt=float("inf")),
        with_(models={"writer": {"requests": float("nan")}}),
        json.dumps({"kind": "session", "session": 2, "t": "yesterday"}),
        json.dumps({"kind": "end", "t": 5, "summary": [1]}),
    ],
)
def test_a_line_of_the_wrong_shape_is_skipped_with_a_warning(tmp_path: Path, line: str) -> None:
    page = report_of(tmp_path, [line])
    assert "1 line(s) of metrics.jsonl could not be read" in page
    assert "NaN" not in page and "nan" not in page.lower().replace("nanoseconds", "")
    # The good tick after it still counts: 2 requests of the writer.
    assert re.search(r'data-model="writer" data-field="requests"[^>]*>2<', page), page


def test_a_run_shorter_than_one_tick_draws_each_series() -> None:
    chart = time_chart("rows", [0.0], 1.0, 0.4, [("written", [3.0])])
    points = re.findall(r'<polyline class="line" points="([^"]+)"', chart)
    assert len(points) == 1
    xs = [float(p.split(",")[0]) for p in points[0].split()]
    assert len(xs) == 2 and xs[1] - xs[0] > 100  # a level line across the plot, not one point


@pytest.mark.parametrize("seconds", [0.0012, 0.02, 0.3, 0.45, 3.0, 25.0])
def test_a_histogram_within_one_decade_has_x_labels(seconds: float) -> None:
    svg = latency_histogram({latency_bucket(seconds): 5}, [("p50", seconds)])
    labels = re.findall(r'<text class="xlab" x="([\d.]+)"[^>]*>([^<]+)</text>', svg)
    assert len(labels) >= 2, svg
    for x, text in labels:
        assert 48 <= float(x) <= 560 - 12  # inside the plot
        assert re.fullmatch(r"[\d.]+(ms|s)", text), text
    assert not any(math.isnan(float(x)) for x, _ in labels)
