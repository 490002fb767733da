"""Traces (SPEC §19): a real run in a real process exports its spans over OTLP/HTTP to a
real receiver on 127.0.0.1 (``tests/otlp_receiver.py``, decoding with opentelemetry-proto):
one span per run, pre-flight check, row batch and model request, GenAI attributes,
parent/child links, prompts only when asked for, and never the API key."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from genwire.testing import FakeOpenAIServer
from tests.otlp_receiver import OTLPReceiver, ReceivedSpan
from tests.support import cli, story_and_review, write

pytest.importorskip("opentelemetry.sdk", reason="the traces need the extra genwire[otel] (in the test extra)")
pytest.importorskip("opentelemetry.proto", reason="decoding the receiver's spans needs opentelemetry-proto")

KEY = "sk-canary-7f3a9c2e5b1d4f6a8c0e"
ROWS, BATCH = 40, 10


def config(url: str, tmp_path: Path) -> dict[str, Any]:
    return {
        "providers": {
            "srv": {
                "kind": "openai",
                "base_url": url,
                "api_key": "${TRACE_TEST_KEY}",
                "headers": {"X-Api-Secret": "${TRACE_TEST_KEY}"},
                "retries": 0,
            }
        },
        "models": {
            "writer": {"provider": "srv", "model": "writer-model", "kind": "chat"},
            "critic": {"provider": "srv", "model": "critic-model", "kind": "chat"},
        },
        "cache": {"dir": str(tmp_path / "responses")},
        "pipeline": {
            "num_records": ROWS,
            "batch_size": BATCH,
            "output": str(tmp_path / "out.jsonl"),
            "max_failure_rate": 0.9,
            "columns": story_and_review(),
        },
    }


def traced_run(receiver: OTLPReceiver, cfg: Path, *args: str, **env: str) -> list[ReceivedSpan]:
    before = len(receiver.spans)
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        "TRACE_TEST_KEY": KEY,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "genwire-trace-test",
        **env,
    }
    proc = cli("run", cfg, "--json", *args, env=environment)
    assert proc.returncode == 0, proc.stderr
    return receiver.spans[before:]


def by_id(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {s.span_id: s for s in spans}


def test_a_run_exports_one_span_per_request_with_genai_attributes_and_no_secret(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server, OTLPReceiver() as receiver:
        server.require_api_key(KEY)
        server.fail_rate("critic-model", 0.2, statuses=(400,), seed=3)  # rows that fail: error.type
        cfg = write(config(server.url, tmp_path), tmp_path / "genwire.yaml")
        spans = traced_run(receiver, cfg, "--no-cache")
        sent = sum(server.requests.values())

        runs = [s for s in spans if s.name == "genwire.run"]
        assert len(runs) == 1 and runs[0].parent_id == ""
        run = runs[0]
        assert run.resource["service.name"] == "genwire-trace-test"
        assert {s.trace_id for s in spans} == {run.trace_id}  # one trace
        ids = by_id(spans)

        checks = [s for s in spans if s.name == "genwire.preflight.check"]
        assert sorted(s.attributes["genwire.check.targets"][0] for s in checks) == ["critic", "writer"]
        assert all(s.parent_id == run.span_id for s in checks)

        batches = [s for s in spans if s.name == "genwire.batch"]
        assert len(batches) == ROWS // BATCH
        assert all(s.parent_id == run.span_id for s in batches)
        assert sorted(s.attributes["genwire.batch.id"] for s in batches) == sorted(
            f"rows {i}-{i + BATCH - 1}" for i in range(0, ROWS, BATCH)
        )

        requests = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
        assert len(requests) == sent  # one span per model request (no retries configured)
        for s in requests:
            parent = ids[s.parent_id]
            assert parent.name in ("genwire.batch", "genwire.preflight.check")
            if parent.name == "genwire.batch":
                assert s.attributes["genwire.batch.id"] == parent.attributes["genwire.batch.id"]
            alias = s.attributes["genwire.model.alias"]
            assert s.name == f"chat {alias}-model"
            assert s.attributes["gen_ai.request.model"] == f"{alias}-model"
            assert s.attributes["gen_ai.system"] == "openai"
            assert s.attributes["genwire.cache.hit"] is False
            assert "gen_ai.input.messages" not in s.attributes  # content only when asked for
        failed = [s for s in requests if "error.type" in s.attributes]
        assert failed and all(s.attributes["error.type"] == "bad_response" and s.status_code == 2 for s in failed)
        answered = [s for s in requests if "error.type" not in s.attributes]
        assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in answered) == sum(server.prompt_tokens.values())
        assert all(s.attributes["gen_ai.usage.output_tokens"] > 0 for s in answered)
        # The key (sent as Authorization and as a header) is nowhere in what was exported.
        assert not any(KEY.encode() in body for body in receiver.bodies)
        assert not any(KEY in str(s.attributes) for s in spans)


def test_prompts_only_when_asked_and_cache_hits_marked(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server, OTLPReceiver() as receiver:
        server.require_api_key(KEY)
        cfg = write(config(server.url, tmp_path), tmp_path / "genwire.yaml")
        spans = traced_run(receiver, cfg, "--no-cache", OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
        requests = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
        stories = [
            s
            for s in requests
            if s.attributes["genwire.model.alias"] == "writer" and "genwire.batch.id" in s.attributes
        ]
        assert len(stories) == ROWS
        assert all("Write about" in s.attributes["gen_ai.input.messages"] for s in stories)
        assert all("gen_ai.output.messages" in s.attributes for s in stories)

        # The same rows again: every answer from the response cache, each a span saying so.
        sent = sum(server.requests.values())
        rerun = traced_run(receiver, cfg, "--fresh", "--skip-preflight")
        assert sum(server.requests.values()) == sent  # nothing sent
        hits = [s for s in rerun if s.attributes.get("genwire.cache.hit") is True]
        assert len(hits) == 2 * ROWS
        batch_ids = {s.span_id for s in rerun if s.name == "genwire.batch"}
        assert all(s.parent_id in batch_ids for s in hits)
        assert not any(KEY.encode() in body for body in receiver.bodies)
