"""Config loading: every error names file:line:col and the key path; all at once."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from genwire.config import load_config, load_config_text
from genwire.errors import ConfigError

VALID = """\
providers:
  nim:
    kind: openai
    base_url: https://integrate.api.nvidia.com/v1
    api_key: ${NVIDIA_API_KEY}
    timeout_s: 60
  local:
    kind: local
models:
  writer:
    provider: nim
    model: meta/llama-3.1-8b-instruct
    kind: chat
    params: {temperature: 0.7, max_tokens: 256}
  embedder:
    provider: local
    model: all-MiniLM-L6-v2
    kind: embedding
    dimensions: 384
datasets:
  corpus:
    kind: documents
    path: ./docs
pipeline:
  num_records: 10
  columns:
    - name: passage
      generator: seed-dataset
      resources: {dataset: corpus}
"""

ENV = {"NVIDIA_API_KEY": "sk-CANARY-config-123"}


def problems(text: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config_text(text, "genwire.yaml", env=ENV if env is None else env)
    return info.value.problems


def test_valid_config_loads_with_secret_hidden() -> None:
    loaded = load_config_text(VALID, "genwire.yaml", env=ENV)
    nim = loaded.config.providers["nim"]
    assert nim.api_key is not None and nim.api_key.get_secret_value() == ENV["NVIDIA_API_KEY"]
    for text in (repr(loaded.config), str(loaded.config), loaded.config.model_dump_json(), repr(nim)):
        assert ENV["NVIDIA_API_KEY"] not in text
    assert loaded.config.models["embedder"].dimensions == 384


@pytest.mark.parametrize(
    ("old", "new", "where", "message"),
    [
        (
            "    dimensions: 384",
            "    dimensions: abc",
            r"genwire\.yaml:19:5 models\.embedder\.dimensions",
            "valid integer",
        ),
        (
            "    timeout_s: 60",
            "    timeout_s: 60\n    bogus: 1",
            r"genwire\.yaml:7:5 providers\.nim\.bogus",
            "unknown key 'bogus'",
        ),
        ("    kind: chat\n", "", r"genwire\.yaml:10:3 models\.writer\.kind", "required key is missing"),
        ("    kind: openai", "    kind: grpc", r"genwire\.yaml:\d+:\d+ providers\.nim", "kind"),
        (
            "    provider: local",
            "    provider: locl",
            r"genwire\.yaml:16:5 models\.embedder\.provider",
            "unknown provider 'locl'",
        ),
        ("  num_records: 10", "  num_records: -3", r"genwire\.yaml:\d+:\d+ pipeline\.num_records", "greater than 0"),
        ("    kind: documents", "    kind: xml", r"genwire\.yaml:\d+:\d+ datasets\.corpus", "kind"),
    ],
)
def test_each_error_names_location_and_key_path(old: str, new: str, where: str, message: str) -> None:
    assert old in VALID
    found = problems(VALID.replace(old, new, 1))
    assert any(re.search(where, p) and message in p for p in found), found


def test_several_problems_reported_at_once() -> None:
    text = VALID.replace("    dimensions: 384", "    dimensions: abc").replace(
        "    timeout_s: 60", "    timeout_s: fast"
    )
    text = text.replace("  num_records: 10", "  num_records: 10\n  colour: blue")
    found = problems(text)
    assert len(found) == 3
    assert {p.split(" ")[1].rstrip(":") for p in found} == {
        "models.embedder.dimensions",
        "providers.nim.timeout_s",
        "pipeline.colour",
    }


def test_yaml_syntax_error_has_position() -> None:
    found = problems(VALID.replace("    kind: chat", "    kind: [chat"))
    assert re.match(r"genwire\.yaml:\d+:\d+: invalid YAML", found[0]), found


def test_duplicate_key_is_an_error() -> None:
    found = problems(VALID.replace("    kind: chat", "    kind: chat\n    kind: embedding"))
    assert re.match(r"genwire\.yaml:14:5 models\.writer\.kind: duplicate key 'kind'", found[0]), found


def test_missing_env_var_names_it_and_its_location() -> None:
    found = problems(VALID, env={})
    assert re.match(
        r"genwire\.yaml:5:14 providers\.nim\.api_key: environment variable NVIDIA_API_KEY is not set", found[0]
    )


def test_env_default_and_substitution_per_scalar() -> None:
    text = VALID.replace("model: meta/llama-3.1-8b-instruct", 'model: "${MODEL:-a#b: c}"')
    text = text.replace("timeout_s: 60", "timeout_s: ${TIMEOUT}")
    loaded = load_config_text(text, "genwire.yaml", env={**ENV, "TIMEOUT": "12.5"})
    assert loaded.config.models["writer"].model == "a#b: c"  # substituted after parsing: intact
    assert loaded.config.providers["nim"].timeout_s == 12.5  # type: ignore[union-attr]
    # A value containing YAML syntax is not re-parsed.
    loaded = load_config_text(text, "genwire.yaml", env={**ENV, "TIMEOUT": "1", "MODEL": "x: [y] # z"})
    assert loaded.config.models["writer"].model == "x: [y] # z"


def test_secret_never_in_errors() -> None:
    text = VALID.replace("    timeout_s: 60", "    timeout_s: nope")
    with pytest.raises(ConfigError) as info:
        load_config_text(text, "genwire.yaml", env=ENV)
    assert ENV["NVIDIA_API_KEY"] not in str(info.value)
    # An api_key of the wrong type must not be echoed either.
    text = VALID.replace("api_key: ${NVIDIA_API_KEY}", "api_key: [sk-CANARY-list-1]")
    with pytest.raises(ConfigError) as info:
        load_config_text(text, "genwire.yaml", env=ENV)
    assert "sk-CANARY-list-1" not in str(info.value)


def test_files_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: no such file"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"pipeline:\n  columns: \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:2:12: not valid UTF-8"):
        load_config(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="empty"):
        load_config(empty)
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_alias_bomb_is_refused_quickly() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lines.append("pipeline: {columns: *a8}")
    with pytest.raises(ConfigError, match="YAML aliases"):
        load_config_text("\n".join(lines), "bomb.yaml")


def test_python_object_tags_are_not_constructed() -> None:
    text = VALID.replace("  num_records: 10", "  num_records: !!python/object/apply:os.system ['echo pwned']")
    found = problems(text)
    assert "genwire.yaml:" in found[0]


def test_relative_paths_resolve_against_the_config_file(tmp_path: Path) -> None:
    sub = tmp_path / "proj"
    sub.mkdir()
    (sub / "genwire.yaml").write_text(VALID)
    loaded = load_config(sub / "genwire.yaml", env=ENV)
    assert loaded.resolve_path("./docs") == sub / "docs"


def test_names_unique_across_models_and_datasets() -> None:
    text = VALID.replace("  corpus:\n", "  writer:\n")
    found = problems(text)
    assert any("'writer' names both a model and a dataset" in p for p in found), found


def _nested(depth: int) -> Any:
    return "pipeline: " + "{a: " * depth + "1" + "}" * depth


def test_deep_nesting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="nesting"):
        load_config_text(_nested(5000), "deep.yaml")
