"""User- and server-supplied text reaches rich tables verbatim, never as markup (issue 10)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from genwire.cli.main import cli
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_server import FakeResponse

BRACKETED = "'genwire[local]' [beta] [/] [bold]x[/bold]"


def test_server_message_and_model_name_are_printed_verbatim(
    fake_openai_server: FakeOpenAIServer, write_config: Callable[[str], Path]
) -> None:
    model = "org/model[beta]"
    fake_openai_server.script(model, [FakeResponse(status=400, json={"error": {"message": BRACKETED}})])
    path = write_config(f"""
providers:
  srv: {{kind: openai, base_url: "{fake_openai_server.url}", retries: 0}}
models:
  w: {{provider: srv, model: "{model}", kind: chat}}
pipeline:
  columns:
    - {{name: q, generator: llm-text, resources: {{model: w}}, params: {{prompt: "hi"}}}}
""")
    result = CliRunner().invoke(cli, ["preflight", str(path)], terminal_width=400)
    assert result.exit_code == 1, result.output
    # The detail cell may wrap at spaces: every bracketed word must survive as written.
    for word in BRACKETED.split():
        assert word in result.stdout
    plan = CliRunner().invoke(cli, ["plan", str(path)], terminal_width=400)
    assert plan.exit_code == 0 and "org/model[beta]" in plan.stdout
