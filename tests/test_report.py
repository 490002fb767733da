"""The run report page and the metrics behind it (SPEC §19): real runs in real processes
against the fake OpenAI server; the page opened in a real headless Chromium over the
DevTools protocol (``tests/browser.py``): no console error, no request, the numbers read
back from the DOM equal the run's ``--json`` summary, canaries stay text."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from genwire.engine.records.metrics import METRICS_FILE
from genwire.engine.report import report_path, write_report
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_server import FakeResponse
from tests.browser import NO_CHROMIUM, find_chromium, open_page
from tests.support import cli_here, start_cli, story_and_review, write

CANARY = '<script>document.title="pwned"</script><img src=x onerror="document.title=1"></textarea><b>bold</b>'
KEY = "sk-report-canary-1b9e4c7d2a"
MODEL_CANARY = 'gpt"><img src=x onerror="document.title=2">'
ERROR_CANARY = '</td></tr></table><script>document.title="err"</script><img src=x onerror=alert(3)>'

# Reads the page back: every data-metric, the models table, failure classes, the plots'
# bars, and any element a canary could have injected into the body.
PROBE = """(() => {
  const metrics = {};
  document.querySelectorAll('[data-metric]').forEach(e => {
    metrics[e.dataset.metric] = e.dataset.value ?? e.textContent;
  });
  const models = {};
  document.querySelectorAll('[data-model]').forEach(e => {
    (models[e.dataset.model] ??= {})[e.dataset.field] = e.textContent;
  });
  const failures = {};
  document.querySelectorAll('[data-failure-class]').forEach(e => { failures[e.dataset.failureClass] = e.textContent; });
  const charts = {};
  document.querySelectorAll('svg.chart').forEach(s => {
    const bars = [...s.querySelectorAll('rect[data-v]')];
    charts[s.getAttribute('aria-label')] = bars.reduce((n, r) => n + Number(r.dataset.v), 0);
  });
  const injected = document.body.querySelectorAll(
    'script, img, iframe, object, embed, textarea, form, input, link, style, b');
  return {metrics, models, failures, charts, injected: injected.length, title: document.title,
          text: document.body.innerText, width: document.documentElement.scrollWidth,
          sections: [...document.querySelectorAll('h2')].map(h => h.textContent)};
})()"""


def config(url: str, tmp_path: Path, rows: int, api_key: str | None = None, **pipeline: Any) -> dict[str, Any]:
    provider = {"kind": "openai", "base_url": url, "max_concurrency": 16, "retries": 1, "backoff_s": 0.05}
    if api_key is not None:
        provider["api_key"] = api_key
    return {
        "providers": {"srv": provider},
        "models": {
            "writer": {"provider": "srv", "model": "writer-model", "kind": "chat"},
            "critic": {"provider": "srv", "model": MODEL_CANARY, "kind": "chat"},
        },
        "cache": {"dir": str(tmp_path / "responses")},
        "pipeline": {
            "num_records": rows,
            "batch_size": 50,
            "output": str(tmp_path / "out.jsonl"),
            "max_failure_rate": 0.5,
            "seed": 7,
            "columns": [
                *story_and_review(),
                {"name": "canary", "generator": "template", "params": {"template": CANARY + " {{ uid }}"}},
            ],
            **pipeline,
        },
    }


def imperfect(server: FakeOpenAIServer, latency: float = 0.01) -> None:
    """Stray 429s on the writer; about 5 % of the critic's requests refused for good
    (rows that fail), with a canary in the error message."""
    server.set_latency("writer-model", latency)
    server.set_latency(MODEL_CANARY, 2 * latency)
    server.fail_rate("writer-model", 0.02, statuses=(429,), seed=1)
    refused = FakeResponse(status=400, json={"error": {"message": ERROR_CANARY}})
    server.fail_rate(MODEL_CANARY, 0.05, statuses=(refused,), seed=2)


class Metrics(HTMLParser):
    """The ``data-metric`` values and the ``data-model`` cells of a report, without a browser."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.metrics: dict[str, str] = {}
        self.models: dict[str, dict[str, str]] = {}
        self._open: tuple[str, str, str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("data-metric"):
            if a.get("data-value") is not None:
                self.metrics[str(a["data-metric"])] = str(a["data-value"])
            else:
                self._open = ("metric", str(a["data-metric"]), "")
        elif a.get("data-model"):
            self._open = ("model", str(a["data-model"]), str(a["data-field"]))

    def handle_data(self, data: str) -> None:
        if self._open is None:
            return
        kind, name, field = self._open
        if kind == "metric":
            self.metrics[name] = data
        else:
            self.models.setdefault(name, {})[field] = data
        self._open = None


def number(text: str) -> float:
    return float(text.replace(",", ""))


def test_a_run_with_429s_and_failing_rows_reports_what_json_says_in_a_real_browser(tmp_path: Path) -> None:
    chromium = find_chromium()
    if chromium is None:
        pytest.skip(NO_CHROMIUM)
    rows = 2000
    with FakeOpenAIServer() as server:
        imperfect(server)
        cfg = write(config(server.url, tmp_path, rows), tmp_path / "genwire.yaml")
        proc = cli_here("run", cfg, "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    output = Path(summary["output"])
    page = report_path(output)
    assert page.is_file() and not output.with_name(output.name + ".checkpoint").exists()  # kept, checkpoint gone
    assert summary["rows_failed"] > 0 and summary["models"]["writer"]["rate_limited"] > 0  # the imperfect run

    visit = open_page(chromium, page, PROBE)
    shot = os.environ.get("GENWIRE_REPORT_SCREENSHOT")  # docs/images/report.png is made this way
    (tmp_path / "report.png").write_bytes(visit.screenshot)
    if shot:
        shutil.copy(tmp_path / "report.png", shot)

    assert visit.console == []
    assert visit.foreign_requests == []  # nothing fetched: no font, script, style or image
    dom = visit.dom
    assert dom["injected"] == 0 and dom["title"].startswith("genwire report")  # canaries are text
    assert CANARY in dom["text"] and ERROR_CANARY in dom["text"] and MODEL_CANARY in dom["text"]
    assert dom["width"] <= 1280  # the layout fits the window: no sideways scrolling
    for section in ("Summary", "Over time", "Models", "Latency", "Pre-flight", "Failed rows", "Sample rows"):
        assert section in dom["sections"]
    metrics = dom["metrics"]
    assert dom["metrics"]["outcome"] == "completed"
    for name in ("rows_written", "rows_failed", "rows_resumed"):
        assert number(metrics[name]) == summary[name], name
    assert number(metrics["rows_requested"]) == rows
    assert metrics["cost_usd"] == "unknown"  # no prices: unknown, never 0
    for alias, usage in summary["models"].items():
        for field in ("requests", "retries", "rate_limited", "prompt_tokens", "completion_tokens", "cached", "batched"):
            assert number(dom["models"][alias][field]) == usage[field], (alias, field)
    assert number(metrics["requests"]) == sum(u["requests"] for u in summary["models"].values())
    assert number(dom["failures"]["bad_response"]) == summary["rows_failed"]
    # The 429 plot holds every 429, each in the bin of the second it happened in.
    total_429 = sum(u["rate_limited"] for u in summary["models"].values())
    assert dom["charts"]["429 answers (rate limited)"] == total_429


def test_kill_at_half_then_resume_the_report_covers_both_sessions(tmp_path: Path) -> None:
    rows = 400
    with FakeOpenAIServer() as server:
        imperfect(server, latency=0.03)
        cfg = write(config(server.url, tmp_path, rows, batch_size=20), tmp_path / "genwire.yaml")
        output = tmp_path / "out.jsonl"
        checkpoint = output.with_name(output.name + ".checkpoint")
        proc = run_until_kept(cfg, checkpoint, rows // 2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)  # reaps it and closes its pipes
        kept = _kept(checkpoint)
        assert rows // 2 <= kept < rows
        assert not report_path(output).exists()  # a kill -9 writes nothing at the end...

        made = cli_here("report", output)  # ...so `genwire report` writes it from the checkpoint
        assert made.returncode == 0, made.stderr
        first = Metrics(report_path(output).read_text(encoding="utf-8"))
        assert first.metrics["outcome"] == "unfinished"
        assert number(first.metrics["rows_written"]) == kept
        # The killed session's requests count (all but its last second, which the kill took).
        assert 0 < number(first.models["writer"]["requests"]) <= server.requests["writer-model"]

        again = cli_here("run", cfg, "--json")
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["rows_resumed"] == kept
    page = report_path(output).read_text(encoding="utf-8")
    report = Metrics(page)
    assert report.metrics["outcome"] == "completed"
    assert "2 sessions" in page
    assert number(report.metrics["rows_resumed"]) == kept
    for alias, usage in summary["models"].items():
        # Both sessions: this one's requests (its --json) plus the killed one's.
        assert (
            number(report.models[alias]["requests"]) >= usage["requests"] + number(first.models[alias]["requests"]) - 1
        )
    done = cli_here("report", output)
    assert done.returncode == 0 and "its report is" in done.stdout  # finished: points at the page


def run_until_kept(cfg: Path, checkpoint: Path, rows: int) -> subprocess.Popen[str]:
    """``genwire run CFG --json`` started, returned once its checkpoint holds ``rows`` rows."""
    proc = start_cli("run", cfg, "--json")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and _kept(checkpoint) < rows:
        time.sleep(0.05)
    return proc


def _kept(checkpoint: Path) -> int:
    count = 0
    for segment in checkpoint.glob("rows-*.jsonl"):
        with contextlib.suppress(OSError):  # a segment may appear while we look
            count += segment.read_bytes().count(b"\n")
    return count


def test_report_of_nothing_is_a_clear_error(tmp_path: Path) -> None:
    proc = cli_here("report", tmp_path / "never.jsonl")
    assert proc.returncode == 2
    assert "no run of" in proc.stderr and "never.jsonl.checkpoint" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_metrics_are_aggregates_and_a_resumed_run_appends(tmp_path: Path) -> None:
    """A stopped run keeps its checkpoint: its metrics file holds sessions and per-second
    ticks, never a line per request; a second session appends to it."""
    rows = 300
    with FakeOpenAIServer() as server:
        server.fail_when(MODEL_CANARY, "-8", 400)  # a quarter of the rows fail (not the probe): stopped
        server.require_api_key(KEY)
        cfg = write(config(server.url, tmp_path, rows, KEY, max_failure_rate=0.1), tmp_path / "genwire.yaml")
        first = cli_here("run", cfg, "--json")
        assert first.returncode == 1
        second = cli_here("run", cfg, "--json")
        assert second.returncode == 1
        sent = sum(server.requests.values())
    metrics = tmp_path / "out.jsonl.checkpoint" / METRICS_FILE
    lines = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines()]
    kinds = [line["kind"] for line in lines]
    assert kinds.count("session") == 2 and kinds.count("end") == 2 and kinds.count("preflight") == 2
    assert [line["outcome"] for line in lines if line["kind"] == "end"] == ["stopped", "stopped"]
    assert len(lines) < sent / 4  # aggregates: far fewer lines than requests
    recorded = sum(m.get("requests", 0) for line in lines if line["kind"] == "tick" for m in line["models"].values())
    assert recorded == sent  # every request counted once, across both sessions
    text = report_path(tmp_path / "out.jsonl").read_text(encoding="utf-8")
    assert KEY not in text and KEY not in metrics.read_text(encoding="utf-8")  # no secret kept or shown
    page = Metrics(text)
    assert page.metrics["outcome"] == "stopped"
    assert number(page.models["critic"]["requests"]) + number(page.models["writer"]["requests"]) == sent


def test_the_report_is_bounded_whatever_the_rows_hold(tmp_path: Path) -> None:
    """Huge cells, many failures, a day of ticks: the page stays small (cut cells, capped
    samples and examples, binned series)."""
    output = tmp_path / "out.jsonl"
    directory = output.with_name(output.name + ".checkpoint")
    directory.mkdir()
    big = "x" * 200_000
    with (directory / "rows-0001.jsonl").open("w") as handle:
        for i in range(0, 2000, 2):
            handle.write(json.dumps({"i": i, "row": {"a": big, "b": i}}) + "\n")
    with (directory / "failed-0001.jsonl").open("w") as handle:
        for i in range(1, 2000, 2):
            record = {"row": i, "column": "a", "error_class": f"class{i % 79}", "error": big, "data": {"a": big}}
            handle.write(json.dumps(record) + "\n")
    with (directory / METRICS_FILE).open("w") as handle:
        handle.write(json.dumps({"kind": "session", "session": 1, "t": 0.0, "columns": ["a", "b"]}) + "\n")
        for second in range(1, 86_400, 3):
            tick = {"writer": {"requests": 5, "rate_limited": second % 2, "latency": {"30": 5}, "peak_in_flight": 4}}
            handle.write(
                json.dumps({"kind": "tick", "session": 1, "t": second, "dt": 3, "rows": {"written": 1}, "models": tick})
                + "\n"
            )
    page = write_report(output)
    size = page.stat().st_size
    assert size < 1_000_000, size
    text = page.read_text(encoding="utf-8")
    report = Metrics(text)
    assert number(report.metrics["rows_written"]) == 1000 and number(report.metrics["rows_failed"]) == 1000
    assert number(report.models["writer"]["requests"]) == 5 * len(range(1, 86_400, 3))
    assert "other" in text  # failure classes beyond the cap are grouped


def test_latency_percentiles_read_from_buckets_are_within_a_bucket() -> None:
    import random

    from genwire.engine.report.figures import percentile
    from genwire.providers.metrics import GROWTH, latency_bucket

    rng = random.Random(4)
    latencies = sorted(rng.lognormvariate(-2.5, 0.8) for _ in range(20_000))
    buckets: dict[int, int] = {}
    for seconds in latencies:
        buckets[latency_bucket(seconds)] = buckets.get(latency_bucket(seconds), 0) + 1
    for q in (0.5, 0.9, 0.99):
        exact = latencies[int(q * len(latencies)) - 1]
        estimate = percentile(buckets, q)
        assert estimate is not None and exact / GROWTH <= estimate <= exact * GROWTH, (q, exact, estimate)
    assert percentile({}, 0.5) is None


def test_ctrl_c_writes_the_report_and_keeps_the_checkpoint(tmp_path: Path) -> None:
    rows = 400
    with FakeOpenAIServer() as server:
        imperfect(server, latency=0.05)
        cfg = write(config(server.url, tmp_path, rows, batch_size=20), tmp_path / "genwire.yaml")
        output = tmp_path / "out.jsonl"
        proc = run_until_kept(cfg, output.with_name(output.name + ".checkpoint"), 40)
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert json.loads(stdout)["ok"] is False
    page = Metrics(report_path(output).read_text(encoding="utf-8"))
    assert page.metrics["outcome"] == "interrupted"
    assert number(page.metrics["rows_written"]) == _kept(output.with_name(output.name + ".checkpoint")) >= 40


def test_a_priced_run_shows_what_it_cost_as_its_json_summary_says(tmp_path: Path) -> None:
    """SPEC §16 on the page: the ledger's cost, per model and in total, as `--json` says it."""
    with FakeOpenAIServer() as server:
        cfg = config(server.url, tmp_path, 30)
        cfg["models"]["writer"]["price"] = {"input_per_mtok": 150.0, "output_per_mtok": 600.0}
        cfg["models"]["critic"]["price"] = {"input_per_mtok": 30.0, "output_per_mtok": 60.0}
        proc = cli_here("run", write(cfg, tmp_path / "genwire.yaml"), "--json")
    assert proc.returncode == 0, proc.stderr
    cost = json.loads(proc.stdout)["cost"]
    assert cost["total_usd"] > 0
    page = Metrics(report_path(tmp_path / "out.jsonl").read_text(encoding="utf-8"))
    assert float(page.metrics["cost_usd"]) == pytest.approx(cost["total_usd"])
    for alias, spent in cost["by_model"].items():
        assert number(page.models[alias]["usd"].lstrip("$")) == pytest.approx(spent["usd"], abs=5e-5), alias
