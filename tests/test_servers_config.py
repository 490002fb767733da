"""``servers:`` in the config (SPEC §23): located errors, a missing engine at validate
(exit 2) naming what to install, and the plan's server -> provider -> model -> columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servers_support import genwire, one_server_config, pipeline

from genwire.config.loader import load_config_text
from genwire.errors import ConfigError

MODELS = "models:\n  m: {provider: p, model: m1, kind: chat}\n"


def problems(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, "genwire.yaml")
    return str(caught.value)


def test_base_url_or_server_exactly_one() -> None:
    both = "providers:\n  p: {kind: openai, server: s, base_url: 'http://h/v1'}\n" + MODELS + pipeline()
    neither = "providers:\n  p: {kind: openai}\n" + MODELS + pipeline()
    for text in (both, neither):
        assert "genwire.yaml:2:3 providers.p: give either base_url: (an endpoint) or server:" in problems(text)


def test_an_unknown_server_is_named_with_a_suggestion() -> None:
    text = one_server_config("m1").replace("server: stand_in", "server: stand_im")
    assert "providers.p.server: unknown server 'stand_im' (did you mean 'stand_in'?) (servers: stand_in)" in problems(
        text
    )


def test_kind_keys_are_checked() -> None:
    text = (
        "servers:\n  s: {kind: command, model: m1}\nproviders:\n  p: {kind: openai, server: s}\n" + MODELS + pipeline()
    )
    assert "kind: command needs command:" in problems(text)
    text = text.replace("kind: command, model: m1", "kind: vllm, model: m1, health: /ready")
    assert "command: and health: belong to kind: command" in problems(text)
    uneven = text.replace("health: /ready", "gpus: [0, 1, 2], replicas: 2")
    assert "gpus [0, 1, 2] cannot be shared evenly by 2 replicas" in problems(uneven)


def test_an_engine_not_installed_is_a_validate_error_naming_what_to_install(tmp_path: Path) -> None:
    text = "servers:\n  s: {kind: vllm, model: Qwen/Qwen2.5-7B-Instruct}\nproviders:\n  p: {kind: openai, server: s}\n"
    (tmp_path / "genwire.yaml").write_text(text + MODELS + pipeline())
    checked = genwire("validate", "genwire.yaml", cwd=tmp_path, env={"PATH": str(tmp_path)})  # no vllm on it
    assert checked.returncode == 2
    assert (
        "genwire.yaml:2:7 servers.s.kind: kind vllm needs vLLM, which is not installed (no `vllm` on PATH): "
        "pip install vllm" in checked.stderr
    )


def test_plan_shows_server_provider_model_columns(tmp_path: Path) -> None:
    text = one_server_config("m1").replace(
        "servers:\n", "servers:\n  idle: {kind: command, command: [python], model: m2}\n"
    )
    (tmp_path / "genwire.yaml").write_text(text)
    shown = genwire("plan", "--format", "json", "genwire.yaml", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    servers = {s["name"]: s for s in json.loads(shown.stdout)["servers"]}
    assert servers["stand_in"] == {
        "name": "stand_in",
        "kind": "command",
        "model": "m1",
        "providers": ["p"],
        "models": ["m"],
        "used_by": ["a"],
        "started": True,
        "replicas": 1,
    }
    assert servers["idle"]["started"] is False
