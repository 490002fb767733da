"""The embedded models are accounted as HTTP models are (issue 41 item 9): their calls go
through the run's cost meter (the ledger, the estimate) and its request recorder (the
report page's latency, in-flight and requests-per-second data). The models really run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from support import cli, write

from genwire.engine.records.checkpoint import checkpoint_dir
from genwire.engine.records.metrics import METRICS_FILE
from genwire.engine.report import report_path

MAX_TOKENS = 12


def local_pipeline(root: Path, n: int) -> Path:
    return write(
        {
            "providers": {"local": {"kind": "local", "max_concurrency": 2}},
            # Loading the weights on a loaded 2-core machine takes its time: not asserted here.
            "preflight": {"timeout_s": 300, "deadline_s": 600},
            "models": {
                "writer": {
                    "provider": "local",
                    "model": "SmolLM2-135M-Instruct",
                    "kind": "chat",
                    "params": {"max_tokens": MAX_TOKENS, "temperature": 0},
                },
                "embedder": {"provider": "local", "model": "all-MiniLM-L6-v2", "kind": "embedding"},
            },
            "pipeline": {
                "num_records": n,
                "batch_size": 2,
                "output": str(root / "out.jsonl"),
                "columns": [
                    {"name": "i", "generator": "sampler", "params": {"kind": "uuid"}},
                    {
                        "name": "q",
                        "generator": "llm-text",
                        "resources": {"model": "writer"},
                        "params": {"prompt": "Name a colour ({{ i }})."},
                    },
                    {
                        "name": "v",
                        "generator": "embedding",
                        "resources": {"model": "embedder"},
                        "params": {"column": "q"},
                    },
                ],
            },
        },
        root / "genwire.yaml",
    )


def json_of(*args: str | Path) -> dict[str, Any]:
    done = cli(*args, "--json", timeout=900)
    assert done.returncode == 0, done.stderr
    value: dict[str, Any] = json.loads(done.stdout)
    return value


def test_the_estimate_the_ledger_and_the_report_see_the_embedded_models(tmp_path: Path) -> None:
    path = local_pipeline(tmp_path, 4)
    found = json_of("estimate", path, "-k", "2")
    writer, embedder = found["models"]["writer"], found["models"]["embedder"]
    assert writer["sample_requests"] == 2 and writer["requests_per_row"] == 1.0
    assert writer["input_tokens_mean"] > 10 and 0 < writer["output_tokens_mean"] <= MAX_TOKENS
    assert writer["latency_s_mean"] > 0 and writer["requests"] == 2  # the 2 rows still to do
    assert embedder["sample_requests"] >= 1 and embedder["input_tokens_mean"] > 0
    assert embedder["output_tokens_mean"] == 0
    assert found["duration_s"] > 0 and found["requests"] >= 3
    sampled = found["cost"]["by_model"]
    assert sampled["writer"]["input_tokens"] > 0 and sampled["writer"]["output_tokens"] > 0

    # The sample's session, in the checkpoint's metrics: latency, in flight, requests.
    lines = [json.loads(x) for x in (checkpoint_dir(tmp_path / "out.jsonl") / METRICS_FILE).read_text().splitlines()]
    ticks = [line["models"]["writer"] for line in lines if line["kind"] == "tick" and "writer" in line["models"]]
    assert sum(sum(t.get("latency", {}).values()) for t in ticks) >= 2 + 1  # the probe and the 2 rows
    assert max(t.get("peak_in_flight", 0) for t in ticks) >= 1
    assert sum(t.get("requests", 0) for t in ticks) >= 3

    # The run goes on; its cost table (the ledger) holds every paid call's tokens, both sessions'.
    summary = json_of("run", path)
    assert summary["rows_resumed"] == 2
    usage, cost = summary["models"]["writer"], summary["cost"]["by_model"]["writer"]
    assert usage["requests"] >= 2 and usage["prompt_tokens"] > 0  # the rows (and the probe, unless cached)
    assert cost["input_tokens"] == sampled["writer"]["input_tokens"] + usage["prompt_tokens"]
    assert cost["output_tokens"] == sampled["writer"]["output_tokens"] + usage["completion_tokens"]
    assert summary["cost"]["by_model"]["embedder"]["input_tokens"] > 0

    # The finished run's page: latency percentiles, a histogram and over-time plots with data.
    page = report_path(tmp_path / "out.jsonl").read_text(encoding="utf-8")
    assert page.count('class="hbar"') >= 1
    assert re.search(r'data-model="writer" data-field="peak_in_flight">[1-9]', page)
    in_flight = page[page.index('aria-label="Requests in flight') :]
    assert '<polyline class="line"' in in_flight[: in_flight.index("</svg>")]
    per_second = page[page.index('aria-label="Requests per second') :]
    assert '<polyline class="line"' in per_second[: per_second.index("</svg>")]
