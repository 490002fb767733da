"""Probes send only what the run sends (SPEC §11): an alias every use of which has a
request shape gets its shaped probes only; the plain probe stays for a registry slot and
a generator without ``request_shape``. Over real HTTP against the fake server, asserting
exactly which bodies reached it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner
from support import RegistryUser

import genwire
from genwire.cli.main import cli
from genwire.generators import Generator, GeneratorMetadata, ResourceKind
from genwire.providers.probes import CHAT_PROBE_PROMPT
from genwire.testing import FakeOpenAIServer

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


class Shapeless(Generator[Any]):
    """A plugin that declares a chat slot but no ``request_shape``."""

    metadata = GeneratorMetadata(
        name="shapeless", description="no request_shape", required_resources={"model": ResourceKind.CHAT_MODEL}
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [await self.resources.model.complete("hi") for _ in rows]


def text(name: str, alias: str = "writer", **params: Any) -> dict[str, Any]:
    return {
        "name": name,
        "generator": "llm-text",
        "resources": {"model": alias},
        "params": {"prompt": "About {{ topic }}", **params},
    }


def structured(name: str, alias: str = "writer") -> dict[str, Any]:
    return {
        "name": name,
        "generator": "llm-structured",
        "resources": {"model": alias},
        "params": {"prompt": "A person who likes {{ topic }}", "schema": SCHEMA},
    }


def pipeline(server: FakeOpenAIServer, root: Path, *columns: dict[str, Any]) -> dict[str, Any]:
    return {
        "providers": {"srv": {"kind": "openai", "base_url": server.url, "retries": 0}},
        "models": {
            "writer": {"provider": "srv", "model": "writer", "kind": "chat", "params": {"temperature": 0.3}},
            "judge": {"provider": "srv", "model": "judge", "kind": "chat"},
        },
        "pipeline": {
            "num_records": 2,
            "output": str(root / "out.jsonl"),
            "columns": [
                {"name": "topic", "generator": "sampler", "params": {"kind": "category", "values": ["tea"]}},
                *columns,
            ],
        },
    }


def sent(server: FakeOpenAIServer) -> list[tuple[str, dict[str, Any]]]:
    """(model, body without the messages' text) of every request, in a stable order."""
    out = []
    for model, body in server.bodies:
        slim = {k: v for k, v in body.items() if k not in ("messages", "model")}
        slim["roles"] = [m["role"] for m in body["messages"]]
        slim["plain_prompt"] = body["messages"][-1]["content"] == CHAT_PROBE_PROMPT
        out.append((model, slim))
    return ordered(out)


def ordered(bodies: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    return sorted(bodies, key=lambda item: json.dumps(item, sort_keys=True))


async def preflight(cfg: dict[str, Any], *generators: type[Generator[Any]]) -> genwire.PreflightReport:
    async with genwire.boot(cfg, generators=list(generators)) as container:
        return await container.preflight(use_cache=False)


PLAIN = {"max_tokens": 16, "temperature": 0.3, "roles": ["user"], "plain_prompt": True}


async def test_an_alias_every_use_of_which_is_shaped_gets_no_plain_probe(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, text("t", system="Be terse.", top_p=0.5), structured("s"))
    report = await preflight(cfg)
    assert report.ok and [(c.target, c.variant) for c in report.checks] == [("writer", "t"), ("writer", "s")]
    fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA, "strict": True}}
    shaped_text = {**PLAIN, "top_p": 0.5, "roles": ["system", "user"]}
    shaped_json = {
        "max_tokens": 256,
        "temperature": 0.3,
        "response_format": fmt,
        "roles": ["user"],
        "plain_prompt": False,
    }
    assert sent(fake_openai_server) == ordered([("writer", shaped_json), ("writer", shaped_text)])


async def test_a_registry_slot_keeps_the_plain_probe_beside_the_shapes(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    registry = {"name": "r", "generator": "registry-user", "resources": {"models": ["writer"]}, "params": {"use": "w"}}
    cfg = pipeline(fake_openai_server, tmp_path, structured("s"), registry)
    report = await preflight(cfg, RegistryUser)
    assert report.ok and [c.variant for c in report.checks] == [None, "s"]
    assert report.check("writer").used_by == ["s", "r"]
    bodies = sent(fake_openai_server)
    assert len(bodies) == 2 and ("writer", PLAIN) in bodies
    assert sum("response_format" in body for _, body in bodies) == 1


async def test_a_plugin_without_request_shape_keeps_the_plain_probe(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    plugin = {"name": "p", "generator": "shapeless", "resources": {"model": "judge"}}
    cfg = pipeline(fake_openai_server, tmp_path, plugin, text("t", alias="judge", system="Be terse."))
    report = await preflight(cfg, Shapeless)
    assert report.ok and [c.variant for c in report.checks] == [None, "t"]
    plain = {k: v for k, v in PLAIN.items() if k != "temperature"}  # judge has no params of its own
    assert sent(fake_openai_server) == ordered([("judge", plain), ("judge", {**plain, "roles": ["system", "user"]})])


async def test_columns_with_one_shape_send_one_probe_and_it_is_what_the_run_sends(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, text("a", top_p=0.9), text("b", top_p=0.9))
    report = await preflight(cfg)
    assert report.ok and [c.variant for c in report.checks] == ["a"]  # b shares a's probe
    [(_, probe)] = fake_openai_server.bodies
    fake_openai_server.reset_stats()
    async with genwire.boot(cfg) as container:
        result = await container.run(skip_preflight=True)
    assert result.rows_written == 2
    run_bodies = [body for _, body in fake_openai_server.bodies]
    assert len(run_bodies) == 4
    # The probe carries exactly the request fields the run's requests carry (its own
    # prompt and its tiny completion budget aside).
    assert all(set(body) | {"max_tokens"} == set(probe) for body in run_bodies)
    assert all(body["top_p"] == probe["top_p"] == 0.9 and body["temperature"] == 0.3 for body in run_bodies)


async def test_llm_text_columns_that_add_nothing_send_one_plain_probe(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    # temperature: 0.3 is the model's own param: the column adds nothing to the request.
    cfg = pipeline(fake_openai_server, tmp_path, text("a"), text("b", temperature=0.3), text("c", alias="judge"))
    report = await preflight(cfg)
    assert report.ok and [(c.target, c.variant) for c in report.checks] == [("writer", None), ("judge", None)]
    assert sent(fake_openai_server) == [
        ("judge", {k: v for k, v in PLAIN.items() if k != "temperature"}),
        ("writer", PLAIN),
    ]


def test_the_json_report_says_which_checks_are_plain_and_which_shaped(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = pipeline(
        fake_openai_server, tmp_path, structured("s"), text("t", alias="judge"), text("u", alias="judge", top_p=0.2)
    )
    path = tmp_path / "genwire.yaml"
    path.write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(cli, ["preflight", str(path), "--json", "--no-cache"])
    assert result.exit_code == 0, result.output
    checks = json.loads(result.stdout)["checks"]
    assert [(c["target"], c["variant"], c["used_by"]) for c in checks] == [
        ("judge", None, ["t", "u"]),  # t adds nothing to judge's requests: the plain probe
        ("judge", "u", ["t", "u"]),
        ("writer", "s", ["s"]),  # writer's only use is shaped
    ]
    assert fake_openai_server.total_requests == 3


class TwoSlots(Generator[Any]):
    """Calls one model through two slots, each with its own request shape."""

    metadata = GeneratorMetadata(
        name="two-slots",
        description="draft and check",
        required_resources={"drafter": ResourceKind.CHAT_MODEL, "checker": ResourceKind.CHAT_MODEL},
    )

    @classmethod
    def request_shape(cls, params: Any, *, slot: str, column: str) -> dict[str, Any] | None:
        return {"top_p": 0.1} if slot == "drafter" else {"response_format": {"type": "json_object"}}

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [None for _ in rows]


async def test_two_shapes_of_one_column_on_one_alias_are_two_checks_and_neither_hides_the_other(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai_server.reject_response_format("judge")
    column = {"name": "d", "generator": "two-slots", "resources": {"drafter": "judge", "checker": "judge"}}
    report = await preflight(pipeline(fake_openai_server, tmp_path, column), TwoSlots)
    assert [(c.variant, c.status) for c in report.checks] == [("d", "ok"), ("d", "failed")]
    assert not report.ok and fake_openai_server.requests["judge"] == 2
