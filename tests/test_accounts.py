"""A run's accounting in one place (``engine.money.accounts``, SPEC §22): a Ray worker's
receipts add up to exactly what it did, and the driver's ``RunAccounts`` counts them as
its own requests — usage, ledger (with rows and column), cost, per-endpoint figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import genwire
from genwire.engine.money.accounts import RunAccounts
from genwire.engine.records.ledger import LEDGER_NAME
from genwire.engine.records.receipt import LedgerEntry, Receipt, ReceiptBook, add_stats
from genwire.providers.budget import Paid
from genwire.providers.metrics import AliasSecond
from genwire.providers.pool import EndpointStats
from genwire.providers.usage import ModelUsage


def config(root: Path) -> dict[str, Any]:
    return {
        "providers": {"srv": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {
            "writer": {
                "provider": "srv",
                "model": "w",
                "kind": "chat",
                "price": {"input_per_mtok": 1, "output_per_mtok": 2},
            }
        },
        "pipeline": {
            "num_records": 4,
            "output": str(root / "out.jsonl"),
            "columns": [
                {"name": "text", "generator": "llm-text", "resources": {"model": "writer"}, "params": {"prompt": "x"}}
            ],
        },
    }


def test_a_workers_receipts_add_up_to_what_it_did() -> None:
    book = ReceiptBook()
    usage = {"writer": ModelUsage(requests=3, prompt_tokens=30, completion_tokens=9)}
    endpoints = {"writer": {"r0": EndpointStats(3, 1, [0.1, 0.2])}}
    first = book.take(usage, endpoints)
    usage["writer"].add(ModelUsage(requests=2, retries=1, prompt_tokens=20))
    endpoints["writer"]["r0"].requests += 2
    endpoints["writer"]["r0"].latencies.append(0.3)
    second = book.take(usage, endpoints)
    third = book.take(usage, endpoints)  # nothing happened since

    assert first.usage["writer"].requests == 3 and second.usage["writer"] == ModelUsage(
        requests=2, retries=1, prompt_tokens=20
    )
    assert third.usage == {} and third.endpoints == {}
    assert second.endpoints["writer"]["r0"] == EndpointStats(2, 0, [0.3])
    total = ModelUsage()
    for receipt in (first, second, third):
        total.add(receipt.usage.get("writer", ModelUsage()))
    assert total == usage["writer"]


async def test_a_workers_receipts_count_every_request_past_what_the_meter_measures() -> None:
    """Receipts carry the worker's request counts whole and its measurements up to the
    meter's cap; the driver's meter adds them up the same way (``add_stats``)."""
    from genwire.providers.budget.figures import MEASURED_REQUESTS
    from genwire.providers.budget.meter import CostMeter
    from genwire.providers.pricing import Price

    price = {"writer": Price(1e-6, 1e-6, 1e-6, 1e-6, "test")}
    worker = CostMeter(price)
    book = ReceiptBook()
    book.meter = worker
    driver = CostMeter(price)
    counts = (MEASURED_REQUESTS - 5, 20, 7)  # the second receipt crosses the cap, the third is past it
    for count in counts:
        for _ in range(count):
            worker.settle(await worker.reserve("writer", 40, 0), (10, 3), 0.2)
        receipt = book.take({}, {})
        add_stats(driver, receipt.stats)
    measured = driver.stats["writer"]
    assert measured.requests == sum(counts) == worker.stats["writer"].requests
    assert len(measured.latencies) == MEASURED_REQUESTS == len(measured.input_tokens)


def test_the_driver_counts_a_receipt_as_its_own_requests(tmp_path: Path) -> None:
    container = genwire.boot(config(tmp_path))
    accounts = RunAccounts(container, max_cost_usd=None, engine="ray")
    accounts.open(tmp_path, probing=False)
    paid = Paid("writer", 1000, 500, 0.002, False)
    receipt = Receipt(
        usage={"writer": ModelUsage(requests=2, retries=1, prompt_tokens=1000, completion_tokens=500)},
        paid=[LedgerEntry(paid, (7, 8), "text")],
        seconds={"writer": AliasSecond(sent=2, answered=2, latency={5: 2})},
        endpoints={"writer": {"r0": EndpointStats(2, 1, [0.5])}},
    )
    accounts.feed(receipt)
    accounts.feed(Receipt(endpoints={"writer": {"r0": EndpointStats(1, 0, [0.7])}}))
    try:
        assert accounts.usage()["writer"].requests == 2
        assert accounts.endpoints()["writer"]["r0"] == EndpointStats(3, 1, [0.5, 0.7])
        assert accounts.meter.spent_usd == 0.002 and accounts.paid
        cost = accounts.cost(accounts.usage())
        assert cost["by_model"]["writer"] == {
            "input_tokens": 1000,
            "output_tokens": 500,
            "requests": 1,
            "usd": 0.002,
            "price_source": cost["by_model"]["writer"]["price_source"],
        }
        assert cost["this_session_usd"] == 0.002
    finally:
        accounts.detach()
    (line,) = (tmp_path / LEDGER_NAME).read_text().splitlines()
    assert json.loads(line) == {
        "m": "writer",
        "in": 1000,
        "out": 500,
        "usd": 0.002,
        "rows": [7, 8],
        "col": "text",
        "b": False,
    }
