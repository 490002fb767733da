"""`genwire preflight --data-designer`: Data Designer's own files, in its own layout (field
names from data-designer v0.9.0rc1, values as a user writes them), checked against the
fake server by genwire's pre-flight; located errors for malformed files; no secret shown."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from genwire.cli.main import cli
from genwire.config.data_designer import data_designer_dir, load_data_designer
from genwire.errors import ConfigError
from genwire.preflight.data_designer import preflight_data_designer
from genwire.preflight.report import PreflightReport
from genwire.testing import FakeOpenAIServer
from genwire.testing.fake_server import FakeResponse

ENV_KEY = "nvapi-CANARY-env-41c7e0"
LITERAL_KEY = "sk-CANARY-literal-9b2e55"
HEADER_VALUE = "org-CANARY-header-3c1d8f"
ENV = {"DD_TEST_NVIDIA_KEY": ENV_KEY}

PROVIDERS = """\
providers:
  - name: nvidia
    endpoint: {url}
    provider_type: openai
    api_key: DD_TEST_NVIDIA_KEY
    extra_headers:
      X-Org-Id: {header}
  - name: openai
    endpoint: {url}
    provider_type: openai
    api_key: DD_TEST_UNSET_OPENAI_KEY
  - name: vllm
    endpoint: {url}
    api_key: {literal}
    extra_body:
      chat_template_kwargs:
        enable_thinking: false
"""

MODEL_CONFIGS = """\
model_configs:
  - alias: writer
    model: meta/llama-3.1-70b-instruct
    provider: nvidia
    inference_parameters:
      generation_type: chat-completion
      temperature: 0.7
      top_p: 0.9
      max_tokens: 2048
      max_parallel_requests: 8
      timeout: 30
      extra_body:
        reasoning_effort: low
  - alias: judge
    model: qwen/qwen3-8b
    provider: vllm
    inference_parameters:
      temperature:
        distribution_type: uniform
        params: {low: 0.5, high: 0.9}
  - alias: coder
    model: nvidia/nemotron-coder
    provider: nvidia
  - alias: gone
    model: retired/model-v1
    provider: nvidia
  - alias: embedder
    model: nvidia/llama-nemotron-embed-1b-v2
    provider: nvidia
    inference_parameters:
      generation_type: embedding
      encoding_format: float
      dimensions: 1024
      extra_body:
        input_type: query
  - alias: short-embedder
    model: text-embedding-3-small
    provider: vllm
    inference_parameters:
      dimensions: 256
  - alias: later
    model: not/deployed-yet
    provider: nvidia
    skip_health_check: true
  - alias: painter
    model: black-forest-labs/flux.1-dev
    provider: nvidia
    inference_parameters:
      generation_type: image
  - alias: gpt-4.1
    model: gpt-4.1
    provider: openai
    inference_parameters:
      temperature: 0.85
"""

PIPELINE = """\
columns:
  - name: topic
    column_type: sampler
    sampler_type: category
    params: {values: [science, history]}
  - name: question
    column_type: llm-text
    model_alias: writer
    prompt: "Write a question about {{ topic }}"
  - name: answer_quality
    column_type: llm-judge
    model_alias: judge
    prompt: "Rate {{ question }}"
    scores: []
  - name: question_vector
    column_type: embedding
    model_alias: embedder
    target_column: question
"""


def write_setup(directory: Path, url: str, *, providers: str = PROVIDERS, configs: str = MODEL_CONFIGS) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    text = providers.format(url=url, header=HEADER_VALUE, literal=LITERAL_KEY)
    (directory / "model_providers.yaml").write_text(text, encoding="utf-8")
    (directory / "model_configs.yaml").write_text(configs, encoding="utf-8")
    return directory


def check(directory: Path, pipeline: Path | None = None, **kwargs: Any) -> PreflightReport:
    setup = load_data_designer(directory, env=ENV, pipeline=pipeline)
    return asyncio.run(preflight_data_designer(setup, **kwargs))


def server_with_failures() -> FakeOpenAIServer:
    server = FakeOpenAIServer(latency=0.01).start()
    server.script("retired/model-v1", [404])
    server.script("text-embedding-3-small", ["wrong_dimensions"])
    return server


def test_every_check_right_in_one_run(tmp_path: Path) -> None:
    server = server_with_failures()
    try:
        report = check(write_setup(tmp_path / "dd", server.url))
    finally:
        server.stop()
    got = {c.target: (c.kind, c.status, c.error_class) for c in report.checks}
    assert got == {
        "writer": ("chat_model", "ok", None),
        "judge": ("chat_model", "ok", None),
        "coder": ("chat_model", "ok", None),
        "gone": ("chat_model", "failed", "not_found"),
        "embedder": ("embedding_model", "ok", None),
        "short-embedder": ("embedding_model", "failed", "bad_response"),
        "later": ("chat_model", "skipped", None),
        "painter": ("image_model", "skipped", None),
        "gpt-4.1": ("chat_model", "failed", "auth"),
    }
    assert [c.target for c in report.checks] == list(got)  # the file's order
    assert not report.ok
    assert report.check("short-embedder").message == (
        "embedding response data[0].embedding has 257 dimensions, but dimensions is set to 256"
    )
    assert report.check("embedder").message == "1 vector, 1024 dimensions"
    assert report.check("later").message.startswith("skip_health_check: true in its model config (")
    assert report.check("later").message.endswith("model_configs.yaml:44:5 model_configs[6].skip_health_check)")
    assert report.check("painter").message == "image models are not checked"
    missing = report.check("gpt-4.1").message
    assert "environment variable DD_TEST_UNSET_OPENAI_KEY is not set" in missing and "'openai'" in missing
    # Nothing was sent for the skipped, the image and the key-less alias.
    assert set(server.requests) == {
        "meta/llama-3.1-70b-instruct",
        "qwen/qwen3-8b",
        "nvidia/nemotron-coder",
        "retired/model-v1",
        "nvidia/llama-nemotron-embed-1b-v2",
        "text-embedding-3-small",
    }
    assert all(n == 1 for n in server.requests.values())  # 404 and bad vectors are not retried


def test_requests_carry_the_inference_parameters_and_never_data_designers_own(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        check(write_setup(tmp_path / "dd", server.url))
        bodies = server.last_body
        headers = server.last_headers
    writer = bodies["meta/llama-3.1-70b-instruct"]
    assert {k: writer[k] for k in ("temperature", "top_p", "max_tokens", "reasoning_effort")} == {
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 2048,
        "reasoning_effort": "low",  # extra_body is merged into the body, as Data Designer sends it
    }
    judge = bodies["qwen/qwen3-8b"]
    assert judge["temperature"] == 0.9  # a distribution is probed with its largest value
    assert judge["chat_template_kwargs"] == {"enable_thinking": False}  # the provider's extra_body
    embedder = bodies["nvidia/llama-nemotron-embed-1b-v2"]
    assert embedder["encoding_format"] == "float" and embedder["dimensions"] == 1024
    assert embedder["input_type"] == "query"
    own = {"generation_type", "max_parallel_requests", "timeout", "extra_body", "extra_headers", "skip_health_check"}
    for body in bodies.values():
        assert own.isdisjoint(body)
    assert headers["meta/llama-3.1-70b-instruct"]["X-Org-Id"] == HEADER_VALUE
    assert headers["nvidia/llama-nemotron-embed-1b-v2"]["X-Org-Id"] == HEADER_VALUE
    assert "X-Org-Id" not in headers["qwen/qwen3-8b"]  # another provider's headers stay its own
    assert headers["meta/llama-3.1-70b-instruct"]["Authorization"] == f"Bearer {ENV_KEY}"  # named variable
    assert headers["qwen/qwen3-8b"]["Authorization"] == f"Bearer {LITERAL_KEY}"  # literal key


def test_data_designers_settings_configure_the_provider(tmp_path: Path) -> None:
    setup = load_data_designer(write_setup(tmp_path / "dd", "http://127.0.0.1:9/v1"), env=ENV)
    assert setup.loaded is not None
    config = setup.loaded.config
    by_alias = {alias: name for name, alias in setup.names.items()}
    writer = config.models[by_alias["writer"]]
    provider = config.providers[writer.provider]
    assert (provider.max_concurrency, provider.timeout_s) == (8, 30)  # type: ignore[union-attr]
    coder_provider = config.providers[config.models[by_alias["coder"]].provider]
    assert (coder_provider.max_concurrency, coder_provider.timeout_s) == (4, 60)  # type: ignore[union-attr]
    assert writer.probe_max_tokens == 2048  # the probe sends the alias's max_tokens
    assert config.models[by_alias["short-embedder"]].dimensions == 256


def test_pipeline_config_checks_only_the_aliases_its_columns_name(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE, encoding="utf-8")
    with FakeOpenAIServer() as server:
        report = check(write_setup(tmp_path / "dd", server.url), pipeline)
        sent = set(server.requests)
    assert [(c.target, c.status, c.used_by) for c in report.checks] == [
        ("writer", "ok", ["question"]),
        ("judge", "ok", ["answer_quality"]),
        ("embedder", "ok", ["question_vector"]),
    ]
    assert report.ok and sent == {"meta/llama-3.1-70b-instruct", "qwen/qwen3-8b", "nvidia/llama-nemotron-embed-1b-v2"}


def test_pipeline_in_the_full_format_with_its_own_model_configs(tmp_path: Path) -> None:
    """``data_designer:`` (what ``config_builder.to_yaml`` writes) with ``model_configs``
    of its own: Data Designer uses those instead of the home file's."""
    pipeline = tmp_path / "builder.yaml"
    pipeline.write_text(
        textwrap.dedent("""\
        data_designer:
          model_configs:
            - alias: local-writer
              model: my/writer
              provider: vllm
              inference_parameters: {max_tokens: 64}
          columns:
            - {name: text, column_type: llm-text, model_alias: local-writer, prompt: hi}
            - {name: verdict, column_type: my-plugin, model_alias: local-writer, judge_model_alias: writer}
        library_version: 0.9.0rc1
        """),
        encoding="utf-8",
    )
    with FakeOpenAIServer() as server:
        directory = write_setup(tmp_path / "dd", server.url)
        with pytest.raises(ConfigError) as info:  # "writer" is in the home file, not in the pipeline's own
            check(directory, pipeline)
        assert "builder.yaml:9:74 data_designer.columns[1].judge_model_alias: no model config defines alias " in str(
            info.value
        )
        pipeline.write_text(
            pipeline.read_text().replace("judge_model_alias: writer", "judge_model_alias: local-writer")
        )
        report = check(directory, pipeline)
        assert server.last_body["my/writer"]["max_tokens"] == 64
    assert [(c.target, c.used_by) for c in report.checks] == [("local-writer", ["text", "verdict"])]


@pytest.mark.parametrize(
    ("configs", "expected"),
    [
        (
            "model_configs:\n  - alias: a\n    model: m\n    provider: nvidia\n"
            "    inference_parameters: {temperature: 3}\n",
            "model_configs.yaml:5:28 model_configs[0].inference_parameters.temperature: "
            "temperature must be between 0 and 2 (got 3)",
        ),
        (
            "model_configs:\n  - alias: a\n    model: m\n    provider: nvidia\n"
            "    inference_parameters: {generation_type: chat}\n",
            "model_configs.yaml:5:28 model_configs[0].inference_parameters.generation_type: got 'chat'; "
            "expected one of chat-completion, embedding, image",
        ),
        (
            "model_configs:\n  - alias: a\n    model: m\n    provider: nvidai\n",
            "model_configs.yaml:4:5 model_configs[0].provider: unknown provider 'nvidai' "
            "(model_providers.yaml defines: nvidia, openai, vllm)",
        ),
        (
            "model_configs:\n  - alias: e\n    model: m\n    provider: nvidia\n"
            "    inference_parameters: {dimensions: abc}\n",
            "model_configs.yaml:5:28 model_configs[0].inference_parameters.dimensions: "
            "Input should be a valid integer, got 'abc'",
        ),
        (
            "model_configs:\n  - alias: a\n    provider: nvidia\n",
            "model_configs.yaml:2:5 model_configs[0].model: required key is missing",
        ),
        (
            "model_configs:\n  - {alias: a, model: m, provider: nvidia}\n  - {alias: a, model: n, provider: nvidia}\n",
            "model_configs.yaml:3:6 model_configs[1].alias: alias 'a' is defined twice "
            "(first at model_configs.yaml:2:5 model_configs[0])",
        ),
        ("", "model_configs.yaml:1:1: the file is empty; it needs at least a model_configs: list"),
        (
            "model_configs: {a: 1}\n",
            "model_configs.yaml:1:1 model_configs: expected a list of model configs; got a mapping",
        ),
    ],
)
def test_malformed_model_configs_are_located(tmp_path: Path, configs: str, expected: str) -> None:
    directory = write_setup(tmp_path / "dd", "http://127.0.0.1:9/v1", configs=configs)
    with pytest.raises(ConfigError) as info:
        load_data_designer(directory, env=ENV)
    assert expected in str(info.value).replace(str(directory) + "/", "")


def test_malformed_providers_are_located_and_every_problem_reported(tmp_path: Path) -> None:
    providers = (
        "providers:\n"
        "  - name: a\n    endpoint: integrate.api.nvidia.com/v1\n    api_key: 12345678901\n"
        "  - name: b\n    endpoint: http://x/v1\n    provider_type: bedrock\n"
        "    extra_headers: {{X-Key: 99887766554433}}\n"
    )
    directory = write_setup(tmp_path / "dd", "http://127.0.0.1:9/v1", providers=providers)
    with pytest.raises(ConfigError) as info:
        load_data_designer(directory, env=ENV)
    text = str(info.value).replace(str(directory) + "/", "")
    assert "(4 problems)" in text
    assert "model_providers.yaml:3:5 providers[0].endpoint: got 'integrate.api.nvidia.com/v1'; write an http" in text
    assert "model_providers.yaml:4:5 providers[0].api_key: Input should be a valid string" in text
    assert "model_providers.yaml:7:5 providers[1].provider_type: got 'bedrock'; Data Designer supports" in text
    assert "model_providers.yaml:8:21 providers[1].extra_headers.X-Key: Input should be a valid string" in text
    assert "12345678901" not in text and "99887766554433" not in text  # secrets are never quoted back


def test_missing_directory_or_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such directory; give the Data Designer config directory"):
        load_data_designer(tmp_path / "absent", env={})
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "model_providers.yaml").write_text("providers: [{name: a, endpoint: 'http://x/v1'}]\n")
    with pytest.raises(ConfigError, match=r"model_configs\.yaml: no such file; Data Designer keeps model configs"):
        load_data_designer(tmp_path / "dd", env={})


def test_directory_order_dir_then_env_then_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert data_designer_dir(tmp_path / "x", env={"DATA_DESIGNER_HOME": "/dd"}, home=home) == tmp_path / "x"
    assert data_designer_dir(None, env={"DATA_DESIGNER_HOME": "/dd"}, home=home) == Path("/dd")
    assert data_designer_dir(None, env={}, home=home) == home / ".data-designer"


def test_older_files_default_provider_is_honoured(tmp_path: Path) -> None:
    """Before 0.7 an alias could leave ``provider`` out and take ``default:``."""
    providers = PROVIDERS + "default: vllm\n"
    configs = "model_configs:\n  - {alias: a, model: old/model}\n"
    with FakeOpenAIServer() as server:
        report = check(write_setup(tmp_path / "dd", server.url, providers=providers, configs=configs))
        assert server.last_headers["old/model"]["Authorization"] == f"Bearer {LITERAL_KEY}"
    assert report.ok


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), env={**ENV, **(env or {})})
    return result.exit_code, result.stdout, result.stderr


def test_cli_report_exit_codes_and_no_secret_anywhere(tmp_path: Path) -> None:
    server = server_with_failures()
    try:
        directory = write_setup(tmp_path / "dd", server.url)
        server.script("meta/llama-3.1-70b-instruct", [FakeResponse(status=401, echo_auth=True)])
        code, table, err = invoke("preflight", "--data-designer", str(directory))
        assert code == 1 and "Traceback" not in err
        for alias in ("writer", "short-embedder", "painter", "gpt-4.1"):
            assert alias in table
        assert "image models are not checked" in table and "DD_TEST_UNSET_OPENAI_KEY" in table
        server.script("retired/model-v1", [404])
        server.script("text-embedding-3-small", ["wrong_dimensions"])
        code, out, _ = invoke("preflight", "--data-designer", str(directory), "--json")
        report = json.loads(out)
        assert code == 1 and {c["target"]: c["status"] for c in report["checks"]}["writer"] == "ok"
        code, from_env, _ = invoke("preflight", "--data-designer", "--json", env={"DATA_DESIGNER_HOME": str(directory)})
        assert code == 1 and json.loads(from_env)["checks"][0]["target"] == "writer"
        setup = load_data_designer(directory, env=ENV)
        reprs = repr(setup) + str(setup.loaded.config if setup.loaded else "")
    finally:
        server.stop()
    assert "auth" in table  # the echoed key was classified, and scrubbed
    for text in (table, err, out, from_env, reprs):
        assert ENV_KEY not in text and LITERAL_KEY not in text and HEADER_VALUE not in text


def test_cli_passes_and_rejects_wrong_use(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(PIPELINE, encoding="utf-8")
    with FakeOpenAIServer() as server:
        directory = write_setup(tmp_path / "dd", server.url)
        code, out, _ = invoke("preflight", "--data-designer", str(directory), "--config", str(pipeline))
        assert code == 0 and "passed" in out and "question_vector" in out
    assert invoke("preflight")[0] == 2
    assert invoke("preflight", "genwire.yaml", "--data-designer", str(directory))[0] == 2
    assert invoke("preflight", "genwire.yaml", "--config", str(pipeline))[0] == 2
    pipeline.write_text(PIPELINE.replace("model_alias: judge", "model_alias: jugde"), encoding="utf-8")
    code, _, err = invoke("preflight", "--data-designer", str(directory), "--config", str(pipeline))
    assert code == 2
    assert (
        "pipeline.yaml:12:5 columns[2].model_alias: no model config defines alias 'jugde' (did you mean 'judge'?)"
        in err
    )
    code, _, err = invoke("preflight", "--data-designer", str(tmp_path / "nowhere"))
    assert code == 2 and "no such directory" in err and "Traceback" not in err


def test_the_probe_cache_serves_a_second_run(tmp_path: Path) -> None:
    configs = "model_configs:\n  - {alias: w, model: cached/model, provider: nvidia}\n"
    with FakeOpenAIServer() as server:
        directory = write_setup(tmp_path / "dd", server.url, configs=configs)
        args = ("preflight", "--data-designer", str(directory), "--json", "--cache-ttl", "3600")
        env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
        first, second = (json.loads(invoke(*args, env=env)[1]) for _ in range(2))
        assert server.requests["cached/model"] == 1
        assert invoke(*args, "--no-cache", env=env)[0] == 0 and server.requests["cached/model"] == 2
    assert first["checks"][0]["cached"] is False and second["checks"][0]["cached"] is True
    assert HEADER_VALUE not in "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json"))


def test_real_entry_point(tmp_path: Path) -> None:
    directory = write_setup(tmp_path / "dd", "http://127.0.0.1:9/v1", configs="model_configs: [1, 2\n")
    proc = subprocess.run(
        [sys.executable, "-m", "genwire.cli.main", "preflight", "--data-designer", str(directory)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "invalid YAML" in proc.stderr and "Traceback" not in proc.stderr


def test_anthropic_providers_are_reported_not_checked(tmp_path: Path) -> None:
    providers = (
        PROVIDERS + "  - name: claude\n    endpoint: https://api.anthropic.com/v1\n    provider_type: Anthropic\n"
    )
    configs = "model_configs:\n  - {alias: sonnet, model: claude-sonnet-4, provider: claude}\n"
    report = check(write_setup(tmp_path / "dd", "http://127.0.0.1:9/v1", providers=providers, configs=configs))
    only = report.check("sonnet")
    assert (only.status, report.ok) == ("skipped", True)
    assert "provider_type 'anthropic'; genwire checks OpenAI-compatible providers only" in only.message


# --- headers in genwire.yaml (what extra_headers translate to) ---------------------------

NATIVE = """
providers:
  a: {{kind: openai, base_url: "{url}", headers: {{X-Org-Id: "{value}"}}}}
  b: {{kind: openai, base_url: "{url}", headers: {{X-Org-Id: other-org-value}}}}
models:
  one: {{provider: a, model: same, kind: chat}}
  two: {{provider: b, model: same, kind: chat}}
pipeline:
  columns:
    - {{name: q, generator: llm-text, resources: {{model: one}}, params: {{prompt: x}}}}
    - {{name: r, generator: llm-text, resources: {{model: two}}, params: {{prompt: x}}}}
"""


async def test_native_headers_are_sent_part_of_the_identity_and_never_shown(
    fake_openai_server: FakeOpenAIServer,
) -> None:
    import genwire
    from genwire.config import load_config_text

    text = NATIVE.format(url=fake_openai_server.url, value=HEADER_VALUE)
    container = genwire.boot(load_config_text(text, "genwire.yaml"))
    async with container:
        report = await container.preflight()
        assert fake_openai_server.last_headers["same"]["X-Org-Id"] in (HEADER_VALUE, "other-org-value")
    assert report.ok and len(report.checks) == 2
    assert fake_openai_server.requests["same"] == 2  # different headers: probed apart, not deduplicated
    shown = repr(container.config) + report.model_dump_json()
    assert HEADER_VALUE not in shown
    bad = text.replace("X-Org-Id:", '"Bad Header":').replace('"other-org-value"', "x")
    with pytest.raises(ConfigError) as info:
        load_config_text(bad, "genwire.yaml")
    assert "providers.a.headers: header name 'Bad Header' is not a valid HTTP header name" in str(info.value)
    assert HEADER_VALUE not in str(info.value)


def test_data_designers_files_are_not_substituted(tmp_path: Path) -> None:
    """``${VAR}`` means nothing to Data Designer: a key holding ``$`` is sent as written."""
    providers = "providers:\n  - name: p\n    endpoint: {url}\n    api_key: sk-${{NOT_A_VAR}}-$$-tail\n"
    configs = "model_configs:\n  - {alias: a, model: dollar/model, provider: p}\n"
    with FakeOpenAIServer() as server:
        report = check(write_setup(tmp_path / "dd", server.url, providers=providers, configs=configs))
        assert server.last_headers["dollar/model"]["Authorization"] == "Bearer sk-${NOT_A_VAR}-$$-tail"
    assert report.ok
