"""What a user reads of a run (issue 49, items 15-17 and 26), in real processes against the
fake OpenAI server: a rerun of a finished run touches nothing and sends nothing; a failed
pre-flight's page knows its prices and says nothing was generated; small costs keep their
digits everywhere; the summary splits its clock as the bar does, explains the in-flight
limit, says how to get a cost, and says nothing of a cache that served nothing."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import cli_here, story_and_review, write

from genwire.engine.report import report_path
from genwire.providers.money import usd
from genwire.testing import FakeOpenAIServer

PRICE = {"input_per_mtok": 0.15, "output_per_mtok": 0.6}  # gpt-4o-mini's: a few rows cost millionths


def config(server: FakeOpenAIServer, root: Path, *, critic_price: bool = True, **pipeline: Any) -> Path:
    critic: dict[str, Any] = {"provider": "srv", "model": "gpt-4o-mini", "kind": "chat"}
    if critic_price:
        critic["price"] = PRICE
    cfg = {
        "providers": {"srv": {"kind": "openai", "base_url": server.url, "retries": 0, "max_concurrency": 8}},
        "models": {
            "writer": {"provider": "srv", "model": "writer-model", "kind": "chat", "price": PRICE},
            "critic": critic,
        },
        "cache": {"dir": str(root / "responses")},
        "pipeline": {"num_records": 6, "output": str(root / "out" / "data.jsonl"), "seed": 3, **pipeline},
    }
    cfg["pipeline"].setdefault("columns", story_and_review())
    return write(cfg, root / "genwire.yaml")


def files(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``folder``: its mtime (ns) and bytes."""
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes()) for p in folder.rglob("*") if p.is_file()
    }


def run_again(
    server: FakeOpenAIServer, cfg: Path, folder: Path, holds: str, *args: tuple[str, ...]
) -> list[subprocess.CompletedProcess[str]]:
    """Runs ``cfg`` to the end (``folder`` then ``holds`` the file named), then the same
    command again (and with each of ``args``): no request is sent and every file under
    ``folder`` keeps its bytes and mtime. Returns the reruns."""
    first = cli_here("run", cfg)
    assert first.returncode == 0, first.stderr
    before = files(folder)
    assert holds in before
    server.reset_stats()
    reruns = [cli_here("run", cfg), *(cli_here("run", cfg, *extra) for extra in args)]
    assert server.total_requests == 0  # no pre-flight, no row: nothing sent
    assert files(folder) == before  # the output, the page, the rejected file: same bytes, same mtimes
    return reruns


def test_a_rerun_of_a_finished_run_says_it_is_complete_touches_nothing_and_sends_nothing(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = config(server, tmp_path)
        again, as_json = run_again(server, cfg, tmp_path / "out", "data.jsonl.report.html", ("--json",))

        output = tmp_path / "out" / "data.jsonl"
        assert again.returncode == 0, again.stderr
        assert f"already complete: 6 rows in {output}" in again.stdout
        assert "--fresh" in again.stdout and "Pre-flight" not in again.stdout
        assert as_json.returncode == 0, as_json.stderr
        summary = json.loads(as_json.stdout)
        assert summary["already_complete"] is True and summary["ok"] is True
        assert summary["rows_written"] == 6 and summary["output"] == str(output)
        assert "already complete" in as_json.stderr

        # The output edited by hand, or another row count: not the finished run's; it runs.
        longer = cli_here("run", cfg, "-n", "7", "--json")
        assert longer.returncode == 0, longer.stderr
        assert "already_complete" not in json.loads(longer.stdout)
        assert server.total_requests > 0
        fresh = cli_here("run", cfg, "-n", "7", "--fresh", "--json")
        assert fresh.returncode == 0 and "already_complete" not in json.loads(fresh.stdout)


def test_a_rerun_of_a_finished_gated_run_leaves_its_rejected_file_alone(tmp_path: Path) -> None:
    columns = [
        {"name": "n", "generator": "sampler", "params": {"kind": "uniform", "low": 0, "high": 10**9, "integer": True}},
        {"name": "even", "generator": "keep-if", "params": {"expression": "n % 2 == 0"}},
        *story_and_review()[1:],
    ]
    columns[2]["params"] = {"prompt": "Write about {{ n }}"}
    with FakeOpenAIServer() as server:
        (again,) = run_again(
            server, config(server, tmp_path, columns=columns), tmp_path / "out", "data.jsonl.rejected.jsonl"
        )
    assert again.returncode == 0 and "already complete: 6 rows" in again.stdout, again.stderr


def test_a_rerun_after_the_output_was_touched_runs_again(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = config(server, tmp_path)
        assert cli_here("run", cfg).returncode == 0
        output = tmp_path / "out" / "data.jsonl"
        output.write_text(output.read_text(encoding="utf-8") + "\n", encoding="utf-8")
        again = cli_here("run", cfg, "--json")
    assert again.returncode == 0, again.stderr
    assert "already_complete" not in json.loads(again.stdout)


def test_the_first_run_summary_splits_its_clock_explains_its_limit_and_says_how_to_get_a_cost(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        cfg = config(server, tmp_path, critic_price=False)
        first = cli_here("run", cfg)
        assert first.returncode == 0, first.stderr
        rerun = cli_here("run", cfg, "--fresh")  # every answer from the response cache
    assert rerun.returncode == 0, rerun.stderr
    text = " ".join(first.stdout.split())  # rich wraps cells: compare as one line
    assert re.search(r"time │ [\d.]+s: pre-flight [\d.]+s, then [\d.]+s generating \([\d.]+ rows/s\)", text), text
    assert "max_concurrency 8" in text and "ended at" not in text
    assert "no price for critic" in text and "pricing: {source: FILE}" in text and "models.<alias>.price" in text
    assert "saved by the cache" not in text  # a first run: nothing came from the cache
    assert "saved by the cache" in rerun.stdout


def test_a_failed_preflight_page_knows_its_prices_and_that_nothing_was_generated(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        server.fail_rate("gpt-4o-mini", 1.0, statuses=(400,))
        proc = cli_here("run", config(server, tmp_path))
    assert proc.returncode == 1, proc.stderr
    page = report_path(tmp_path / "out" / "data.jsonl").read_text(encoding="utf-8")
    assert "genwire-finished" not in page  # a failed run marks nothing finished
    assert "no prices set" not in page and "no price for" not in page
    spent = float(re.search(r'data-metric="cost_usd" data-value="([^"]+)"', page)[1])  # type: ignore[index]
    assert 0 < spent < 0.0001  # the writer's probe, priced: a few millionths of a dollar
    # Under load a session can pass a second: "1.52 s" as well as "283 ms".
    clock = r"1 session · [\d.]+ m?s: pre-flight [\d.]+ m?s, nothing generated<"
    assert re.search(clock, page), page[:3000]
    assert not re.search(r"\d (ms|s) generating", page)
    # The Models table's cost keeps its digits (not $0.0000), as the summary shows it.
    writer = re.search(r'data-model="writer" data-field="usd">([^<]+)<', page)[1]  # type: ignore[index]
    assert writer == usd(spent) and writer != "$0.0000" and re.fullmatch(r"\$0\.0000\d+", writer), writer


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "unknown"),
        (0, "$0"),
        (0.000005, "$0.000005"),
        (0.000027, "$0.000027"),
        (0.0012345, "$0.00123"),
        (0.5, "$0.5000"),
        (1234.56789, "$1,234.5679"),
    ],
)
def test_money_keeps_its_significant_digits(value: float | None, shown: str) -> None:
    assert usd(value) == shown
