"""``llm-structured``, request shapes in the pre-flight, and the probe cache (SPEC §11),
over real HTTP against the fake server (and the embedded chat model for the local case)."""

from __future__ import annotations

import csv
import http.server
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from referencing.exceptions import Unresolvable

import genwire
from genwire.cli.main import cli
from genwire.providers.structured import schema_problem
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_server import FakeResponse

CANARY = "sk-probe-cache-canary-0123456789"
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def structured(name: str = "profile", schema: dict[str, Any] | None = None, **params: Any) -> dict[str, Any]:
    return {
        "name": name,
        "generator": "llm-structured",
        "resources": {"model": "writer"},
        "params": {"prompt": "Invent a person who likes {{ topic }}.", "schema": schema or PERSON, **params},
    }


def pipeline(
    server: FakeOpenAIServer, root: Path, *columns: dict[str, Any], n: int = 6, **extra: Any
) -> dict[str, Any]:
    return {
        "providers": {
            "srv": {"kind": "openai", "base_url": server.url, "api_key": CANARY, "backoff_s": 0.01, "retries": 1}
        },
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat", "params": {"temperature": 0.3}}},
        "pipeline": {
            "num_records": n,
            "output": str(root / "out.jsonl"),
            "columns": [
                {"name": "topic", "generator": "sampler", "params": {"kind": "category", "values": ["tea", "jazz"]}},
                *columns,
            ],
        },
        **extra,
    }


def chat_bodies(server: FakeOpenAIServer) -> list[dict[str, Any]]:
    return [body for model, body in server.bodies if model == "writer"]


# --- the generator --------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
async def test_structured_cells_validate_against_the_schema_in_every_format(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, suffix: str
) -> None:
    import jsonschema

    cfg = pipeline(fake_openai_server, tmp_path, structured())
    async with genwire.boot(cfg) as container:
        result = await container.run(output=tmp_path / f"out{suffix}")
    assert result.rows_written == 6 and result.rows_failed == 0
    out = tmp_path / f"out{suffix}"
    if suffix == ".jsonl":
        cells = [json.loads(line)["profile"] for line in out.read_text().splitlines()]
    elif suffix == ".csv":
        with out.open() as handle:
            cells = [json.loads(row["profile"]) for row in csv.DictReader(handle)]
    else:
        pq = pytest.importorskip("pyarrow.parquet")
        cells = [row["profile"] for row in pq.read_table(out).to_pylist()]
    assert len(cells) == 6
    for cell in cells:
        jsonschema.validate(cell, PERSON)
    body = chat_bodies(fake_openai_server)[-1]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "profile", "schema": PERSON, "strict": True},
    }
    assert body["temperature"] == 0.3


async def test_bad_json_twice_then_good_still_succeeds(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, structured(), n=1)
    fake_openai_server.script("writer", ["not_json", "not_json"])
    async with genwire.boot(cfg) as container:
        result = await container.run(skip_preflight=True)
    assert result.rows_written == 1 and fake_openai_server.requests["writer"] == 3
    retry_prompt = chat_bodies(fake_openai_server)[-1]["messages"][-1]["content"]
    assert "Your previous reply was rejected: the reply is not JSON" in retry_prompt


async def test_a_reply_that_never_validates_fails_its_row_with_the_validation_message(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    wrong = {"choices": [{"index": 0, "message": {"role": "assistant", "content": '{"name": 7, "age": 3}'}}]}
    fake_openai_server.fail_when("writer", "jazz", FakeResponse(json=wrong))
    cfg = pipeline(fake_openai_server, tmp_path, structured(max_attempts=2), n=8)
    cfg["pipeline"]["max_failure_rate"] = 0.9
    async with genwire.boot(cfg) as container:
        result = await container.run(skip_preflight=True)
    errors = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
    assert result.rows_failed == len(errors) > 0 and result.rows_written == 8 - len(errors)
    assert {e["error_class"] for e in errors} == {"bad_response"}
    assert "no reply matched the schema in 2 attempts" in errors[0]["error"]
    assert "['name']: 7 is not of type 'string'" in errors[0]["error"]


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "object", "properties": {"a": {"type": "strnig"}}}, "not a valid JSON Schema"),
        ({"type": "array"}, "must describe an object"),
    ],
)
def test_an_invalid_schema_is_a_config_error_located_at_schema(
    tmp_path: Path, schema: dict[str, Any], problem: str
) -> None:
    with FakeOpenAIServer() as server:
        path = tmp_path / "genwire.yaml"
        path.write_text(yaml.safe_dump(pipeline(server, tmp_path, structured(schema=schema))))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2
    assert "pipeline.columns[1] (profile).params.schema" in result.stderr and problem in result.stderr


class SchemaHost:
    """A real HTTP server holding a schema at /schema.json, counting who fetched it."""

    def __init__(self) -> None:
        host = self
        self.fetches = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                host.fetches += 1
                body = json.dumps({"type": "string"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/schema.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def with_ref(ref: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"name": {"$ref": ref}},
        "$defs": {"known": {"type": "string"}},
    }


@pytest.mark.parametrize("ref", ["REMOTE", "http://example.com/x.json", "#/$defs/missing", "defs.json#/name"])
def test_a_ref_genwire_cannot_resolve_is_a_config_error_at_validate(tmp_path: Path, ref: str) -> None:
    host = SchemaHost()
    try:
        ref = host.url if ref == "REMOTE" else ref
        with FakeOpenAIServer() as server:
            path = tmp_path / "genwire.yaml"
            path.write_text(yaml.safe_dump(pipeline(server, tmp_path, structured(schema=with_ref(ref)))))
        result = CliRunner().invoke(cli, ["validate", str(path)])
    finally:
        host.close()
    assert result.exit_code == 2, result.output
    assert re.search(r"genwire\.yaml:\d+:\d+ pipeline\.columns\[1\] \(profile\)\.params\.schema: ", result.stderr)
    assert f"['properties']['name']['$ref'] = {ref!r} does not resolve inside the schema" in result.stderr
    assert "inline the referenced schema under $defs" in result.stderr
    assert host.fetches == 0  # nothing is fetched to find out


def test_replies_are_validated_without_fetching_any_ref() -> None:
    # A schema that bypasses the config check still cannot make the validator fetch.
    host = SchemaHost()
    try:
        with pytest.raises(Unresolvable):
            schema_problem({"name": "x"}, with_ref(host.url))
    finally:
        host.close()
    assert host.fetches == 0


async def test_local_refs_keep_working(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "properties": {
            "person": {"$ref": "#/$defs/person"},
            "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}},
        },
        "required": ["person", "tags"],
        "$defs": {"person": PERSON, "tag": {"type": "string", "minLength": 2}},
    }
    path = tmp_path / "genwire.yaml"
    path.write_text(yaml.safe_dump(pipeline(fake_openai_server, tmp_path, structured(schema=schema))))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    async with genwire.boot(path) as container:
        run = await container.run()
    assert run.rows_written == 6 and run.rows_failed == 0
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    for row in rows:
        assert schema_problem(row["profile"], schema) is None
        assert set(row["profile"]["person"]) == {"name", "age"}


# --- request shapes in the pre-flight -----------------------------------------------------


def test_a_model_that_rejects_response_format_fails_the_preflight_for_that_column(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai_server.reject_response_format("writer")
    path = tmp_path / "genwire.yaml"
    path.write_text(yaml.safe_dump(pipeline(fake_openai_server, tmp_path, structured())))
    result = CliRunner().invoke(cli, ["preflight", str(path), "--json"])
    assert result.exit_code == 1
    report = genwire.PreflightReport.model_validate_json(result.stdout)
    # Every use of writer is shaped: its structured probe is its only check.
    assert [c.variant for c in report.checks] == ["profile"]
    shaped = report.check("writer", "profile")
    assert shaped.status == "failed" and shaped.error_class == "bad_response"
    assert "response_format is not supported" in shaped.message
    # The run never starts: only its one probe reaches the server.
    fake_openai_server.reset_stats()
    result = CliRunner().invoke(cli, ["run", str(path)])
    assert result.exit_code == 1
    assert "writer (for column profile)" in result.stdout
    assert fake_openai_server.requests["writer"] == 1


async def test_the_probe_carries_the_columns_system_and_the_models_params(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    text = {
        "name": "q",
        "generator": "llm-text",
        "resources": {"model": "writer"},
        "params": {"prompt": "About {{ topic }}", "system": "You are terse.", "top_p": 0.5},
    }
    async with genwire.boot(pipeline(fake_openai_server, tmp_path, text)) as container:
        report = await container.preflight()
    assert [c.variant for c in report.checks] == ["q"] and report.ok
    [body] = chat_bodies(fake_openai_server)  # the shaped probe only: no plain one
    assert body["messages"][0] == {"role": "system", "content": "You are terse."}
    assert body["top_p"] == 0.5 and body["temperature"] == 0.3  # column's and model's params


@pytest.mark.parametrize(("second_schema", "structured_probes"), [(PERSON, 1), ({**PERSON, "required": ["name"]}, 2)])
async def test_one_structured_probe_per_distinct_schema(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, second_schema: dict[str, Any], structured_probes: int
) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, structured("profile"), structured("profile2", schema=second_schema))
    async with genwire.boot(cfg) as container:
        report = await container.preflight()
    assert report.ok
    bodies = chat_bodies(fake_openai_server)
    assert len(bodies) == structured_probes and all("response_format" in body for body in bodies)
    assert [c.variant for c in report.checks] == ["profile", "profile2"][:structured_probes]


async def test_shapes_run_concurrently_and_dedupe_across_aliases_of_one_endpoint(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai_server.set_latency("writer", 1.0)  # long enough that probes started together overlap
    text = {"name": "t", "generator": "llm-text", "resources": {"model": "writer"}, "params": {"prompt": "x"}}
    cfg = pipeline(
        fake_openai_server, tmp_path, text, structured("p1"), structured("p2", schema={**PERSON, "required": []})
    )
    async with genwire.boot(cfg) as container:
        report = await container.preflight()
    assert report.ok and [c.variant for c in report.checks] == [None, "p1", "p2"]
    # Side by side: the three probes were in flight at once (not a speed: a loaded machine
    # stretches the time, never the overlap).
    assert fake_openai_server.peak_in_flight_by_model["writer"] == 3 and fake_openai_server.requests["writer"] == 3


# --- the probe cache -------------------------------------------------------------------------


async def preflight(cfg: dict[str, Any], cache_dir: Path, **kw: Any) -> genwire.PreflightReport:
    async with genwire.boot(cfg) as container:
        return await container.preflight(cache_dir=cache_dir, **kw)


async def test_the_cache_skips_probes_within_the_ttl_and_never_caches_a_failure(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    plain = {"name": "t", "generator": "llm-text", "resources": {"model": "writer"}, "params": {"prompt": "x"}}
    cfg = pipeline(fake_openai_server, tmp_path, plain, structured(), preflight={"cache_ttl_s": 3600})
    first = await preflight(cfg, cache)
    assert first.ok and not any(c.cached for c in first.checks)
    assert fake_openai_server.requests["writer"] == 2  # plain (column t) and shaped (profile)
    second = await preflight(cfg, cache)
    assert second.ok and all(c.cached and c.age_s is not None for c in second.checks)
    assert fake_openai_server.requests["writer"] == 2  # nothing sent
    bypass = await preflight(cfg, cache, use_cache=False)
    assert not any(c.cached for c in bypass.checks) and fake_openai_server.requests["writer"] == 4
    for path in cache.rglob("*"):
        if path.is_file():
            assert CANARY not in path.read_text()

    # A failure is never cached: the failed (plain) probe runs again next time, while the
    # shape that passed beside it is read from the cache.
    cfg["models"]["writer"]["model"] = "other"
    fake_openai_server.fail_when("other", "one short word", 401)  # the plain probe's prompt
    failed = await preflight(cfg, cache)
    assert failed.check("writer").status == "failed" and failed.check("writer", "profile").status == "ok"
    fake_openai_server.clear("other")
    fake_openai_server.reset_stats()
    again = await preflight(cfg, cache)
    assert again.ok and not again.check("writer").cached and again.check("writer", "profile").cached
    assert fake_openai_server.requests["other"] == 1


@pytest.mark.parametrize("change", ["model", "key", "dimensions", "params"])
async def test_a_changed_model_key_dimensions_or_params_misses_the_cache(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, change: str
) -> None:
    cache = tmp_path / "cache"
    cfg = pipeline(fake_openai_server, tmp_path, preflight={"cache_ttl_s": 3600})
    cfg["models"]["embedder"] = {"provider": "srv", "model": "e", "kind": "embedding", "dimensions": 384}
    column = {"name": "v", "generator": "embedding", "resources": {"model": "embedder"}, "params": {"column": "topic"}}
    cfg["pipeline"]["columns"].append(column)
    await preflight(cfg, cache)
    if change == "model":
        cfg["models"]["embedder"]["model"] = "e2"
    elif change == "key":
        cfg["providers"]["srv"]["api_key"] = CANARY + "-rotated"
    elif change == "dimensions":
        fake_openai_server.set_dimensions("e", 128)
        cfg["models"]["embedder"]["dimensions"] = 128
    else:
        cfg["models"]["embedder"]["params"] = {"input_type": "query"}
    fake_openai_server.reset_stats()
    report = await preflight(cfg, cache)
    assert report.ok and not report.check("embedder").cached
    assert fake_openai_server.total_requests >= 1


def test_no_cache_bypasses_it_on_the_cli(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = tmp_path / "genwire.yaml"
    path.write_text(yaml.safe_dump(pipeline(fake_openai_server, tmp_path, structured(), preflight={"cache_ttl_s": 60})))
    assert CliRunner().invoke(cli, ["preflight", str(path)]).exit_code == 0
    cached = CliRunner().invoke(cli, ["preflight", str(path), "--json"])
    assert all(c["cached"] for c in json.loads(cached.stdout)["checks"])
    fresh = CliRunner().invoke(cli, ["preflight", str(path), "--json", "--no-cache"])
    assert not any(c["cached"] for c in json.loads(fresh.stdout)["checks"])
    assert fake_openai_server.requests["writer"] == 2  # one (shaped) probe per uncached pre-flight
    assert (tmp_path / "xdg" / "genwire" / "probes").is_dir()


async def test_a_corrupt_cache_file_is_ignored_with_a_warning(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path, caplog: Any
) -> None:
    cache = tmp_path / "cache"
    cfg = pipeline(fake_openai_server, tmp_path, structured(), preflight={"cache_ttl_s": 3600})
    await preflight(cfg, cache)
    for path in (cache / "probes").glob("*.json"):
        path.write_text("{not json")
    report = await preflight(cfg, cache)
    assert report.ok and not report.check("writer", "profile").cached
    assert "ignoring the unreadable probe cache file" in caplog.text


# --- plugins declare shapes too ---------------------------------------------------------


class Critic(genwire.generators.Generator[Any]):
    metadata = genwire.generators.GeneratorMetadata(
        name="critic",
        description="asks with logprobs",
        required_resources={"judge": genwire.generators.ResourceKind.CHAT_MODEL},
    )

    @classmethod
    def request_shape(cls, params: Any, *, slot: str, column: str) -> dict[str, Any] | None:
        return {"logprobs": True}

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [await self.resources.judge.complete("rate it", logprobs=True) for _ in rows]


async def test_a_plugins_request_shape_is_probed(fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    column = {"name": "score", "generator": "critic", "resources": {"judge": "writer"}}
    async with genwire.boot(pipeline(fake_openai_server, tmp_path, column), generators=[Critic]) as container:
        report = await container.preflight()
    assert report.check("writer", "score").status == "ok"
    assert any(body.get("logprobs") is True for body in chat_bodies(fake_openai_server))


# --- the embedded chat model ------------------------------------------------------------------


async def test_llm_structured_on_the_local_provider(tmp_path: Path) -> None:
    import jsonschema

    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "maximum": 120}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    cfg = {
        "providers": {"local": {"kind": "local"}},
        "models": {"writer": {"provider": "local", "model": "SmolLM2-135M-Instruct", "kind": "chat"}},
        # Loading the weights and a grammar-bound answer on a loaded 2-core machine can take
        # longer than the default 20 s: a behaviour test, not a speed test.
        "preflight": {"timeout_s": 300, "deadline_s": 600},
        "pipeline": {
            "num_records": 2,
            "output": str(tmp_path / "out.jsonl"),
            "columns": [structured(schema=schema)],
        },
    }
    cfg["pipeline"]["columns"][0]["params"]["prompt"] = "Invent a person with a name and an age."
    async with genwire.boot(cfg) as container:
        result = await container.run()
    assert result.preflight is not None and result.preflight.check("writer", "profile").status == "ok"
    assert result.rows_written == 2
    for line in (tmp_path / "out.jsonl").read_text().splitlines():
        jsonschema.validate(json.loads(line)["profile"], schema)
