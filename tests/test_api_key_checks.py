"""``api_key`` is checked at load as ``headers`` are (issue 49, item 6): a key that cannot
be sent, or a base URL with credentials beside it, is a located config error at
``genwire validate`` (exit 2), and the key is never shown."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from genwire.cli.main import cli

BASE = """\
providers:
  srv: {kind: openai, base_url: 'http://127.0.0.1:8000/v1', api_key: KEY}
models:
  writer: {provider: srv, model: m, kind: chat}
pipeline:
  output: out/data.jsonl
  columns:
    - name: question
      generator: llm-text
      resources: {model: writer}
      params: {prompt: "hi"}
"""
CANARY = "sk-CANARY-0123456789"


@pytest.mark.parametrize(
    ("key", "said"),
    [
        (f'"{CANARY}\\r\\nX-Injected: 1"', "providers.srv.api_key: the api_key holds a line break or NUL"),
        (f'"{CANARY}\\n"', "providers.srv.api_key: the api_key holds a line break or NUL"),
        (f'"{CANARY}\\0"', "providers.srv.api_key: the api_key holds a line break or NUL"),
        (
            f'"{CANARY}\u2013x"',
            "providers.srv.api_key: the api_key holds a character that is not Latin-1 (at position 20)",
        ),
    ],
)
def test_an_api_key_that_cannot_be_sent_is_a_located_error(
    write_config: Callable[[str], Path], key: str, said: str
) -> None:
    path = write_config(BASE.replace("KEY", key))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{path}:2:" in result.stderr and said in result.stderr, result.stderr
    assert "CANARY" not in result.output


def test_a_header_value_that_is_not_latin_1_is_a_located_error(write_config: Callable[[str], Path]) -> None:
    path = write_config(BASE.replace("api_key: KEY", "headers: {X-Key: 'tok\u00e9n\u2013'}"))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "the value of header 'X-Key' holds a character that is not Latin-1 (at position 5)" in result.stderr
    assert "tok" not in result.stderr


def test_a_base_url_with_credentials_and_an_api_key_is_a_located_error(write_config: Callable[[str], Path]) -> None:
    path = write_config(BASE.replace("http://", "http://user:pw-CANARY@").replace("KEY", CANARY))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{path}:2:" in result.stderr and "providers.srv" in result.stderr, result.stderr
    assert "base_url carries credentials (user:password@) and api_key is set" in result.stderr
    assert "CANARY" not in result.output


def test_a_sendable_api_key_passes(write_config: Callable[[str], Path]) -> None:
    path = write_config(BASE.replace("KEY", CANARY + "-latin1-\u00e9"))
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 0, result.output
