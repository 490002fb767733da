"""``genwire schema``: the JSON Schema of genwire.yaml, from the same pydantic models, with a
description on every key; it accepts every example config and rejects what ``genwire
validate`` rejects for unknown keys and wrong types."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from genwire.cli.main import cli
from genwire.config.json_schema import config_schema, missing_descriptions, schema_text

REPO = Path(__file__).parent.parent
EXAMPLE_CONFIGS = sorted((REPO / "examples").glob("*/genwire.yaml"))
STARTER = REPO / "genwire" / "cli" / "starter" / "genwire.yaml"


def validator() -> jsonschema.Draft202012Validator:
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_errors(data: Any) -> list[str]:
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(data)]


def test_every_key_has_a_description_and_the_table_names_only_keys() -> None:
    assert missing_descriptions() == [], "add each to genwire/config/descriptions.py (or remove the stale entry)"
    schema = config_schema()
    for name, definition in [("GenwireConfig", schema), *schema["$defs"].items()]:
        assert definition.get("description"), name
        for key, prop in definition.get("properties", {}).items():
            assert prop.get("description"), f"{name}.{key}"
            assert "title" not in prop


def test_enums_defaults_and_secrets_are_in_the_schema() -> None:
    defs = config_schema()["$defs"]
    assert defs["ModelConfig"]["properties"]["kind"]["enum"] == ["chat", "embedding"]
    assert defs["OpenAIProviderConfig"]["properties"]["timeout_s"]["default"] == 60.0
    assert defs["OpenAIProviderConfig"]["properties"]["retry_on"]["default"] == [429, 502, 503, 504]
    assert defs["PipelineConfig"]["properties"]["batch_size"]["default"] == 64
    assert defs["OpenAIProviderConfig"]["properties"]["api_key"]["anyOf"][0]["writeOnly"] is True


@pytest.mark.parametrize("config", [*EXAMPLE_CONFIGS, STARTER], ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_config_validates_against_the_schema(config: Path) -> None:
    assert schema_errors(yaml.safe_load(config.read_text())) == []


@pytest.mark.parametrize("config", [*EXAMPLE_CONFIGS, STARTER], ids=lambda p: str(p.relative_to(REPO)))
def test_each_config_names_the_schema_beside_it(config: Path) -> None:
    first = config.read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=genwire.schema.json"
    assert json.loads((config.parent / "genwire.schema.json").read_text()) == config_schema()


def _set(data: dict[str, Any], path: list[str | int], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(data)
    node: Any = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return changed


BROKEN = {
    "unknown top-level key": (["bogus"], 1),
    "unknown provider key": (["providers", "local", "bogus"], 1),
    "unknown model key": (["models", "writer", "temprature"], 0.2),
    "unknown column key": (["pipeline", "columns", 0, "resource"], {"dataset": "corpus"}),
    "unknown pipeline key": (["pipeline", "num_record"], 5),
    "wrong type: number": (["preflight", "timeout_s"], "abc"),
    "wrong type: integer": (["pipeline", "num_records"], "ten"),
    "wrong type: boolean": (["models", "embedder", "health_check"], "sometimes"),
    "wrong type: mapping": (["models", "writer", "params"], [1, 2]),
    "wrong type: list": (["pipeline", "columns"], {"name": "x"}),
    "not in the enum": (["models", "writer", "kind"], "chatt"),
    "unknown provider kind": (["providers", "local", "kind"], "lokal"),
    "out of range": (["pipeline", "max_failure_rate"], 2),
    "a name that is no name": (["models", "bad name!"], {"provider": "local", "model": "m", "kind": "chat"}),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_the_schema_rejects_what_validate_rejects(case: str, tmp_path: Path) -> None:
    example = REPO / "examples" / "retrieval" / "genwire.yaml"
    path, value = BROKEN[case]
    data = _set(yaml.safe_load(example.read_text()), path, value)
    assert schema_errors(data), f"the schema accepts {case}"
    config = tmp_path / "genwire.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    result = CliRunner().invoke(cli, ["validate", str(config)])
    assert result.exit_code == 2, result.output
    assert "invalid configuration" in result.stderr


def test_a_substituted_value_is_accepted_wherever_a_scalar_goes(tmp_path: Path) -> None:
    # genwire substitutes ${VAR} before it validates: an editor must not flag it.
    data = yaml.safe_load((REPO / "examples" / "retrieval" / "genwire.yaml").read_text())
    data = _set(data, ["preflight", "timeout_s"], "${TIMEOUT:-30}")
    data = _set(data, ["models", "embedder", "dimensions"], "${DIMS}")
    data = _set(data, ["models", "embedder", "health_check"], "${CHECK:-true}")
    assert schema_errors(data) == []
    assert schema_errors(_set(data, ["models", "embedder", "kind"], "${KIND}"))  # kind picks the model: literal
    config = tmp_path / "genwire.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    (tmp_path / "docs").mkdir()
    result = CliRunner(env={"DIMS": "384"}).invoke(cli, ["validate", str(config)])
    assert result.exit_code == 0, result.output


def test_genwire_schema_prints_and_writes_it(tmp_path: Path) -> None:
    printed = CliRunner().invoke(cli, ["schema"])
    assert printed.exit_code == 0 and printed.stdout == schema_text()
    target = tmp_path / "genwire.schema.json"
    written = CliRunner().invoke(cli, ["schema", "--output", str(target)])
    assert written.exit_code == 0 and target.read_text() == schema_text()
    assert f"wrote {target}" in written.stderr
    nowhere = CliRunner().invoke(cli, ["schema", "-o", str(tmp_path / "missing" / "x.json")])
    assert nowhere.exit_code == 2 and "cannot write the schema there" in nowhere.stderr
    assert "invalid configuration" not in nowhere.stderr  # the file is fine: the output path is not
    assert "Traceback" not in nowhere.output


def test_init_writes_the_schema_line_and_the_schema(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    config = tmp_path / "p" / "genwire.yaml"
    assert config.read_text().startswith("# yaml-language-server: $schema=genwire.schema.json\n")
    assert (tmp_path / "p" / "genwire.schema.json").read_text() == schema_text()
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "genwire.schema.json").write_text("{}")  # someone's own file of that name
    again = CliRunner().invoke(cli, ["init", str(tmp_path / "q")])
    assert again.exit_code == 2 and "genwire.schema.json: already exists; pass --force" in again.stderr


def test_loading_a_config_never_builds_the_schema() -> None:
    # genwire validate's start-up stays what it was: the schema and its descriptions are
    # read only by genwire schema.
    code = (
        "import sys; from genwire.config.loader import load_config; load_config(sys.argv[1]);"
        "print(sorted(m for m in sys.modules if m in ('genwire.config.json_schema', 'genwire.config.descriptions')))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(STARTER)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- validate and the schema say the same (issue 41, item 23) -------------------------------------

POOL = """\
providers:
  a: {kind: openai, base_url: "http://127.0.0.1:9/v1"}
  b: {kind: openai, base_url: "http://127.0.0.1:10/v1"}
models:
  writer:
    kind: chat
    model: m
    endpoints:
      - {provider: a}
      - {provider: b, weight: 2}
    min_healthy: 1
pipeline:
  columns:
    - {name: x, generator: sampler, params: {kind: uuid}}
"""

# (what replaces what in POOL, whether it is a valid config), each judged by both.
AGREEMENT = {
    "as written": ("", "", True),
    "a weight in quotes": ("weight: 2}", 'weight: "2"}', False),
    "a boolean in quotes": ("min_healthy: 1", 'min_healthy: 1\n    health_check: "false"', False),
    "a boolean as written": ("min_healthy: 1", "min_healthy: 1\n    health_check: false", True),
    "a number in quotes": ("  a: {kind: openai,", '  a: {timeout_s: "30", kind: openai,', False),
    "an integer written 2.0": ("min_healthy: 1", "min_healthy: 2.0", True),
    "an integer with a fraction": ("min_healthy: 1", "min_healthy: 1.5", False),
    "a weight from the environment": ("weight: 2}", 'weight: "${WEIGHT}"}', True),
    "a boolean from the environment": ("min_healthy: 1", "min_healthy: 1\n    health_check: ${CHECK:-false}", True),
    "provider and endpoints": ("    model: m\n", "    model: m\n    provider: a\n", False),
    "neither provider nor endpoints": (
        "    endpoints:\n      - {provider: a}\n      - {provider: b, weight: 2}\n    min_healthy: 1\n",
        "",
        False,
    ),
    "one provider": (
        "    endpoints:\n      - {provider: a}\n      - {provider: b, weight: 2}\n    min_healthy: 1\n",
        "    provider: a\n",
        True,
    ),
    "min_healthy without endpoints": (
        "    endpoints:\n      - {provider: a}\n      - {provider: b, weight: 2}\n    min_healthy: 1\n",
        "    provider: a\n    min_healthy: 2\n",
        False,
    ),
    "no primary endpoint": ("{provider: a}\n      - {provider: b, weight: 2}", "{provider: a, role: fallback}", False),
    "dimensions of a chat model": ("min_healthy: 1", "min_healthy: 1\n    dimensions: 8", False),
}


@pytest.mark.parametrize("case", AGREEMENT, ids=list(AGREEMENT))
def test_validate_and_the_schema_agree(case: str, tmp_path: Path) -> None:
    from genwire.config.loader import parse_yaml

    old, new, valid = AGREEMENT[case]
    assert old in POOL
    text = POOL.replace(old, new, 1)
    config = tmp_path / "genwire.yaml"
    config.write_text(text)
    result = CliRunner(env={"WEIGHT": "2"}).invoke(cli, ["validate", str(config)])
    assert (result.exit_code == 0) is valid, result.output
    if not valid:
        assert "invalid configuration" in result.stderr and "Traceback" not in result.output
    # The schema reads the file as an editor does: before any ${VAR} is substituted.
    data, _ = parse_yaml(text, "genwire.yaml", substitute=False)
    assert (schema_errors(data) == []) is valid, schema_errors(data)
