"""Config errors show what was written and what to write instead, located (issue 10)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import genwire
from genwire.cli.main import cli
from genwire.generators import Generator, GeneratorMetadata, ResourceKind

BASE = """\
providers:
  local: {kind: local}
models:
  writer: {provider: local, model: SmolLM2-135M-Instruct, kind: chat}
pipeline:
  output: out/data.jsonl
  columns:
    - name: topic
      generator: sampler
      params: {kind: category, values: [a, b]}
    - name: question
      generator: llm-text
      resources: {model: writer}
      params: {prompt: "{{ topic }}"}
"""


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "kind: chat}",
            "kind: chatt}",
            "genwire.yaml:4:59 models.writer.kind: got 'chatt'; expected 'chat' or 'embedding'",
        ),
        (
            "output: out/data.jsonl",
            "output: out/data.xlsx",
            "genwire.yaml:6:3 pipeline.output: '.xlsx' is not a known format; use .jsonl, .csv or .parquet",
        ),
        (
            'params: {prompt: "{{ topic }}"}',
            "params: [1, 2]",
            "genwire.yaml:14:7 pipeline.columns[1] (question).params: expected a mapping, got a list",
        ),
        (
            "- name: topic",
            "- name: _index",
            "genwire.yaml:8:7 pipeline.columns[0] (_index).name: got '_index': names beginning with '_' "
            "are reserved for genwire; rename it",
        ),
        (
            "resources: {model: writer}",
            "resources: {_bound: writer}",
            "pipeline.columns[1] (question).resources._bound: got '_bound': names beginning with '_' are reserved",
        ),
        (
            "  local: {kind: local}",
            "  local: {kind: lokal}",
            "providers.local.kind: got 'lokal'; expected one of 'openai', 'local'",
        ),
        (
            "kind: chat}",
            "kind: chat, dimensions: abc}",
            "models.writer.dimensions: Input should be a valid integer, got 'abc'",
        ),
        (
            "kind: chat}",
            'kind: chat, health_check: "false"}',
            "models.writer.health_check: Input should be a valid boolean, got 'false' (in quotes it is text: "
            "write false without quotes)",
        ),
        (
            "pipeline:\n",
            "cache: {enabled: maybe}\npipeline:\n",
            "genwire.yaml:5:9 cache.enabled: Input should be a valid boolean, got 'maybe'",
        ),
        (
            "pipeline:\n",
            "cache: {dirr: .cache}\npipeline:\n",
            "genwire.yaml:5:9 cache.dirr: unknown key 'dirr' (did you mean 'dir'?)",
        ),
        (
            "pipeline:\n",
            "cache: {dir: ''}\npipeline:\n",
            "genwire.yaml:5:9 cache.dir: String should have at least 1 character, got ''",
        ),
        (  # a whole number is taken as an integer, but shown as written
            "  output: out/data.jsonl",
            "  output: out/data.jsonl\n  num_records: -2.0",
            "genwire.yaml:7:3 pipeline.num_records: Input should be greater than 0, got -2.0",
        ),
    ],
)
def test_errors_show_the_value_and_what_to_write(
    write_config: Callable[[str], Path], old: str, new: str, expected: str
) -> None:
    assert old in BASE
    path = write_config(BASE.replace(old, new, 1))
    with pytest.raises(genwire.ConfigError) as caught:
        genwire.boot(path)
    assert expected in str(caught.value).replace(str(path.parent) + "/", "")
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert expected in result.stderr.replace(str(path.parent) + "/", "")
    assert "^" not in result.stderr and "$'" not in result.stderr  # no regex in any message


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "  output: out/data.jsonl",
            "  num_record: 5",
            "pipeline.num_record: unknown key 'num_record' (did you mean 'num_records'?)",
        ),
        (
            "pipeline:\n",
            "num_record: 5\npipeline:\n",
            "num_record: unknown key 'num_record' (did you mean 'pipeline.num_records'?)",
        ),
        (
            "{kind: local}",
            "{kind: local, max_concurency: 1}",
            "providers.local.max_concurency: unknown key 'max_concurency' (did you mean 'max_concurrency'?)",
        ),
        (
            "kind: chat}",
            "kind: chat, dimension: 8}",
            "models.writer.dimension: unknown key 'dimension' (did you mean 'dimensions'?)",
        ),
        (
            "- name: topic",
            "- name: topic\n      generatr: sampler",
            "(topic).generatr: unknown key 'generatr' (did you mean 'generator'?)",
        ),
        (
            "pipeline:\n",
            "datasets:\n  d: {kind: jsonl, pth: x.jsonl}\npipeline:\n",
            "datasets.d.pth: unknown key 'pth' (did you mean 'path'?)",
        ),
        (
            "  output: out/data.jsonl",
            "  output: out/data.jsonl\n  budget: {max_cost_us: 1}",
            "pipeline.budget.max_cost_us: unknown key 'max_cost_us' (did you mean 'max_cost_usd'?)",
        ),
        ("values: [a, b]}", "values: [a, b], valuez: [c]}", "unknown param 'valuez' (did you mean 'values'?)"),
        ("pipeline:\n", "cache: {zzz: 1}\npipeline:\n", "cache.zzz: unknown key 'zzz'\n"),  # nothing close: no guess
    ],
)
def test_a_mistyped_key_gets_a_did_you_mean_in_every_section(
    write_config: Callable[[str], Path], old: str, new: str, expected: str
) -> None:
    assert old in BASE
    path = write_config(BASE.replace(old, new, 1))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert expected in result.stderr + "\n", result.stderr


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n"])
def test_a_file_that_is_not_a_mapping_is_located_at_its_start(write_config: Callable[[str], Path], text: str) -> None:
    path = write_config(text)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and f"{path}:1:1:" in result.stderr, result.stderr


def test_secret_values_are_never_quoted_back(write_config: Callable[[str], Path]) -> None:
    path = write_config(
        BASE.replace(
            "  local: {kind: local}",
            "  local: {kind: local}\n  srv: {kind: openai, base_url: 'x', api_key: [sk-CANARY-msg]}",
        )
    )
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "providers.srv.api_key" in result.stderr
    assert "CANARY" not in result.stderr


def test_a_plugin_slot_beginning_with_underscore_is_a_plugin_error() -> None:
    with pytest.raises(ValueError, match="slot '_model': names beginning with '_' are reserved"):
        GeneratorMetadata(name="x", description="x", required_resources={"_model": ResourceKind.CHAT_MODEL})


class Mutator(Generator[Any]):
    """Changes what an earlier column wrote, nested values included."""

    metadata = GeneratorMetadata(name="mutator", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        for row in rows:
            row["person"]["name"] = "X"
            row["person"]["tags"].append("changed")
        return [sorted(row) for row in rows]


class Person(Generator[Any]):
    metadata = GeneratorMetadata(name="person", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [{"name": "Ada", "tags": ["a"]} for _ in rows]


async def test_a_generator_cannot_change_an_earlier_column_and_rows_hold_user_columns_only(tmp_path: Path) -> None:
    cfg = {
        "pipeline": {
            "num_records": 3,
            "output": str(tmp_path / "o.jsonl"),
            "columns": [{"name": "person", "generator": "person"}, {"name": "seen", "generator": "mutator"}],
        }
    }
    container = genwire.boot(cfg, generators=[Person, Mutator])
    async with container:
        await container.run(skip_preflight=True)
    import json

    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert rows == [{"person": {"name": "Ada", "tags": ["a"]}, "seen": ["person"]}] * 3


# --- YAML means what the user typed (YAML 1.2 core) ------------------------------------


def test_country_codes_and_yes_no_stay_text(write_config: Callable[[str], Path]) -> None:
    path = write_config(BASE.replace("values: [a, b]", "values: [SE, NO, DK, FI, yes, no, on, off, maybe]"))
    values = genwire.boot(path).config.pipeline.columns[0].params["values"]
    assert values == ["SE", "NO", "DK", "FI", "yes", "no", "on", "off", "maybe"]


def test_core_schema_numbers_booleans_and_null(write_config: Callable[[str], Path]) -> None:
    path = write_config(BASE.replace("values: [a, b]", "values: [true, False, 12, -3, 0x1f, 1.5, 1e3, null, ~, '12']"))
    values = genwire.boot(path).config.pipeline.columns[0].params["values"]
    assert values == [True, False, 12, -3, 31, 1.5, 1000.0, None, None, "12"]


@pytest.mark.parametrize("tag", ["!!int", "!!float", "!!bool", "!!timestamp", "!!binary", "!custom"])
def test_explicit_tags_are_located_errors_that_never_echo_a_secret(
    write_config: Callable[[str], Path], tag: str
) -> None:
    secret = "sk-CANARY-tagged-0042"
    text = BASE.replace(
        "  local: {kind: local}",
        f"  local: {{kind: local}}\n  srv: {{kind: openai, base_url: 'http://h/v1', api_key: {tag} {secret}}}",
    )
    path = write_config(text)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{path}:3:" in result.stderr and "providers.srv.api_key" in result.stderr
    assert secret not in result.output + result.stderr


def test_a_5000_digit_seed_is_a_located_error(write_config: Callable[[str], Path]) -> None:
    path = write_config(BASE.replace("  output: out/data.jsonl", "  output: out/data.jsonl\n  seed: " + "9" * 5000))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "pipeline.seed: a number with 5,000 digits; the limit is 100 digits" in result.stderr


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://h:99999/v1", "Port out of range"),
        ("http://h:abc/v1", "port can't be converted to integer"),
        ("http://[::1/v1", "Invalid IPv6 URL"),
    ],
)
def test_a_base_url_that_would_crash_the_client_is_refused_at_validate(
    write_config: Callable[[str], Path], url: str, said: str
) -> None:
    path = write_config(
        BASE.replace("  local: {kind: local}", f"  local: {{kind: local}}\n  srv: {{kind: openai, base_url: '{url}'}}")
    )
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "providers.srv.base_url: got" in result.stderr and said in result.stderr


def test_a_nested_default_is_refused_located(write_config: Callable[[str], Path]) -> None:
    path = write_config(
        BASE.replace(
            "  local: {kind: local}",
            "  local: {kind: local}\n"
            "  srv: {kind: openai, base_url: 'http://h/v1', api_key: '${GW_NOPE_A:-${GW_NOPE_B}}'}",
        )
    )
    with pytest.raises(genwire.ConfigError, match=r"genwire.yaml:3:\d+ providers.srv.api_key: a default inside"):
        genwire.boot(path, env={})


def test_a_sampler_params_error_points_at_the_users_key(write_config: Callable[[str], Path]) -> None:
    path = write_config(BASE.replace("values: [a, b]", "values: 3"))
    with pytest.raises(genwire.WiringError) as caught:
        genwire.boot(path)
    assert (
        "pipeline.columns[0] (topic).params.values: column 'topic' (generator 'sampler'): expected a list, got 3"
        in str(caught.value)
    )
    assert "category" not in str(caught.value).split("params.values")[0]


# --- genwire init never overwrites or half-writes ---------------------------------------


def test_init_refuses_an_existing_docs_directory_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    mine = tmp_path / "docs" / "01-why-genwire.md"
    mine.write_text("my own notes")
    result = CliRunner().invoke(cli, ["init", str(tmp_path)])
    assert result.exit_code == 2 and "docs: already exists" in result.stderr
    assert mine.read_text() == "my own notes" and sorted(p.name for p in tmp_path.iterdir()) == ["docs"]


@pytest.mark.parametrize("where", ["docs-is-a-file", "below-a-file"])
def test_init_where_it_cannot_write_is_a_clear_error(tmp_path: Path, where: str) -> None:
    if where == "docs-is-a-file":
        (tmp_path / "docs").write_text("x")
        target = tmp_path
    else:
        (tmp_path / "f").write_text("x")
        target = tmp_path / "f" / "x"
    result = CliRunner().invoke(cli, ["init", str(target)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert not (tmp_path / "genwire.yaml").exists()


def test_a_parquet_value_python_cannot_hold_names_the_file(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from genwire.config.schema import FileDatasetConfig
    from genwire.errors import DatasetError
    from genwire.providers.datasets import open_dataset

    path = tmp_path / "times.parquet"
    # A year past 9999: no datetime holds it (a nanosecond timestamp no longer fails where
    # pandas is installed: pyarrow then hands out a pandas Timestamp).
    pq.write_table(pa.table({"t": pa.array([10**12], type=pa.timestamp("s"))}), path)
    dataset = open_dataset("times", FileDatasetConfig(kind="parquet", path=str(path)), path)
    with pytest.raises(DatasetError, match=rf"{path}: cannot convert its values"):
        dataset.load()


# --- templates read what they say ---------------------------------------------------------


@pytest.mark.parametrize("name", ["range", "namespace", "self", "loop"])
def test_a_column_named_like_a_template_builtin_is_refused_located(
    write_config: Callable[[str], Path], name: str
) -> None:
    path = write_config(BASE.replace("- name: topic", f"- name: {name}").replace("{{ topic }}", f"{{{{ {name} }}}}"))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2
    assert f"genwire.yaml:8:7 pipeline.columns[0] ({name}).name: got {name!r}: templates read" in result.stderr


def test_reads_follow_method_and_item_access() -> None:
    from genwire.generators.builtin.common import template_variables

    assert template_variables("{{ person.get('nickname', person.name) }}") == {"person.name"}
    assert template_variables("{{ row['user.name'] }}") == {"row"}
    assert template_variables("{{ p.items }} {{ q['k'] }}") == {"p.items", "q.k"}


async def test_a_method_call_on_a_seed_row_passes_the_preflight_and_runs(tmp_path: Path) -> None:
    from genwire.testing import FakeChatModel

    data = tmp_path / "people.jsonl"
    data.write_text('{"name": "Ada"}\n{"name": "Lin", "nickname": "L"}\n')
    cfg = {
        "providers": {"local": {"kind": "local"}},
        "models": {"writer": {"provider": "local", "model": "SmolLM2-135M-Instruct", "kind": "chat"}},
        "datasets": {"people": {"kind": "jsonl", "path": str(data)}},
        "pipeline": {
            "num_records": 2,
            "output": str(tmp_path / "o.jsonl"),
            "columns": [
                {"name": "person", "generator": "seed-dataset", "resources": {"dataset": "people"}},
                {
                    "name": "hello",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "hi {{ person.get('nickname', person.name) }}"},
                },
            ],
        },
    }
    container = genwire.boot(cfg)
    async with container:
        with container.override("writer", FakeChatModel(lambda prompt: prompt)):
            report = await container.preflight()
            assert report.ok, report.checks
            result = await container.run()
    assert result.rows_written == 2
    assert (tmp_path / "o.jsonl").read_text().count("hi ") == 2
