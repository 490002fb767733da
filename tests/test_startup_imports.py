"""Start-up costs what a command uses (issue 25, SPEC §6): read ``sys.modules`` in a real
process after ``import genwire`` and after each command, through the console script's
own entry point (read from pyproject.toml), and name the modules that must not be there.
No timings: the benchmark (benchmarks/startup.py) measures; this keeps the structure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from genwire.testing import FakeOpenAIServer

ROOT = Path(__file__).parent.parent
RETRIEVAL = ROOT / "examples" / "retrieval" / "genwire.yaml"

# genwire's machinery and the heavy libraries: none of it for --version / --help.
MACHINERY = [
    "pydantic",
    "dependency_injector",
    "yaml",
    "jinja2",
    "rich",
    "aiohttp",
    "jsonschema",
    "asyncio",
    "importlib.metadata",
    "genwire.app",
    "genwire.config",
    "genwire.container",
    "genwire.engine",
    "genwire.preflight",
    "genwire.providers",
]
# What validate and plan never need: the network client, the engine, the live display.
NO_RUN = [
    "aiohttp",
    "jsonschema",
    "rich.live",
    "rich.progress",
    "genwire.engine",
    "genwire.app",
    "ray",
    "onnxruntime",
    "opentelemetry",
    "genwire.cli.commands.lint_command",  # the lint command's importers: the findings print apart
    "genwire.providers.response_cache",  # no request is made, so no cache is read
    "genwire.generators.source_check",  # the example's generators are built-ins: nothing to check
    "genwire.generators.source_scan",
    "genwire.generators.scan_function",
    "sqlite3",
    "genwire.providers.pool",  # the example has no endpoint pool...
    "genwire.providers.tools.handle",  # ...nor tool server: neither is compiled for it
]
NO_ENGINE = ["genwire.engine", "genwire.app", "ray", "rich.live", "rich.progress", "opentelemetry"]


def entry_point() -> tuple[str, str]:
    """The module and function pip's console script ``genwire`` calls."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, function = scripts["genwire"].split(":")
    return module, function


def modules_after(
    *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[int, set[str], str]:
    """Exit code, the modules loaded when the process ended, and stderr, of ``genwire ARGS``."""
    module, function = entry_point()
    code = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: sys.__stderr__.write('\\nMODULES ' + json.dumps(sorted(sys.modules)) + '\\n'))\n"
        f"sys.argv = ['genwire', *{[str(a) for a in args]!r}]\n"
        f"from {module} import {function}\n"
        f"{function}()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=120, env=env)
    head, _, tail = proc.stderr.rpartition("\nMODULES ")
    return proc.returncode, set(json.loads(tail)), head


def loaded(modules: set[str], forbidden: list[str]) -> list[str]:
    """The forbidden modules (or any submodule of them) that were loaded."""
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden))


def test_import_genwire_loads_nothing_but_itself() -> None:
    code = "import json, sys; import genwire; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = set(json.loads(proc.stdout))
    # genwire.lazy: the few standard-library lines behind the packages' lazy names;
    # genwire.version: the one line of __version__.
    assert sorted(m for m in modules if m.startswith("genwire")) == ["genwire", "genwire.lazy", "genwire.version"]
    assert loaded(modules, [*MACHINERY, "click"]) == []


def test_the_public_names_still_resolve() -> None:
    import genwire

    for name in genwire.__all__:
        assert getattr(genwire, name) is not None, name
    assert genwire.boot.__module__ == "genwire.app"
    assert set(genwire.__all__) <= set(dir(genwire))
    with pytest.raises(AttributeError, match="no_such_name"):
        genwire.no_such_name  # noqa: B018


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["run", "--help"], ["-h"]])
def test_version_and_help_load_click_and_none_of_the_machinery(args: list[str]) -> None:
    code, modules, stderr = modules_after(*args)
    assert code == 0, stderr
    assert "click" in modules
    assert loaded(modules, MACHINERY) == []


def test_the_version_is_the_packages() -> None:
    module, function = entry_point()
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.argv = ['genwire', '--version']; from {module} import {function}; {function}()",
        ],
        capture_output=True,
        text=True,
    )
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert proc.stdout.strip() == f"genwire, version {version}"


@pytest.mark.parametrize("command", [["validate"], ["plan"], ["plan", "--format", "json"]])
def test_validate_and_plan_load_no_client_engine_or_live_display(command: list[str]) -> None:
    code, modules, stderr = modules_after(*command, RETRIEVAL, cwd=RETRIEVAL.parent)
    assert code == 0, stderr
    assert "genwire.container.core" in modules  # the command did wire the pipeline
    assert loaded(modules, NO_RUN) == []


def test_validate_imports_only_the_generators_the_config_names(
    install_plugin: Callable[..., Path], tmp_path: Path
) -> None:
    """Entry points are resolved by name: neither the built-ins the example does not use
    nor an installed plugin that raises on import are imported."""
    imported = tmp_path / "imported"  # the plugin's import leaves this behind, then fails
    source = f"import pathlib\npathlib.Path({str(imported)!r}).touch()\nraise ImportError('no GPU here')"
    site = install_plugin("broken-plugin", "broken_on_import", source, {"my-plugin": "broken_on_import:Gen"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    code, modules, stderr = modules_after("validate", RETRIEVAL, cwd=RETRIEVAL.parent, env=env)
    assert code == 0, stderr
    assert not imported.exists() and "broken_on_import" not in modules
    named = {"seed_dataset", "llm_text", "template", "hard_negatives"}  # the example's columns
    builtins = {m.rpartition(".")[2] for m in modules if m.startswith("genwire.generators.builtin.")}
    unused = {"sampler", "embedding", "embedding_dedup", "llm_structured", "llm_tools"}
    assert named <= builtins and not builtins & unused
    # The same process sees the plugin: `genwire plugins` imports every entry point.
    code, _, stderr = modules_after("plugins", cwd=tmp_path, env=env)
    assert code != 0 and imported.exists() and "entry point 'my-plugin'" in stderr


def one_model_config(folder: Path, url: str, api_key: str | None = "sk-x", **pipeline: Any) -> Path:
    """A config of one llm-text column on one model of the server at ``url``."""
    config = folder / "genwire.yaml"
    column = {"name": "q", "generator": "llm-text", "resources": {"model": "writer"}, "params": {"prompt": "hi"}}
    key = {} if api_key is None else {"api_key": api_key}
    cfg = {
        "providers": {"srv": {"kind": "openai", "base_url": url, **key}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "pipeline": {"columns": [column], **pipeline},
    }
    config.write_text(json.dumps(cfg), encoding="utf-8")
    return config


def test_preflight_loads_the_client_it_sends_with_but_not_the_engine(tmp_path: Path) -> None:
    """An http:// endpoint: the lean client (httptools), never aiohttp (~150 ms, once timed
    inside the stage: issue 49); the same endpoint through a URL with credentials: aiohttp."""
    with FakeOpenAIServer() as server:
        config = one_model_config(tmp_path, server.url)
        code, modules, stderr = modules_after("preflight", config, "--json", cwd=tmp_path)
        assert code == 0, stderr
        assert "httptools" in modules and server.requests["writer"] == 1  # it did probe, over HTTP
        assert loaded(modules, ["aiohttp", *NO_ENGINE]) == []
        config = one_model_config(tmp_path, server.url.replace("http://", "http://user:pw@"), api_key=None)
        code, modules, stderr = modules_after("preflight", config, "--json", "--no-cache", cwd=tmp_path)
    assert code == 0, stderr
    assert "aiohttp" in modules and server.requests["writer"] == 2
    assert loaded(modules, NO_ENGINE) == []


def test_a_run_loads_opentelemetry_only_when_the_environment_asks_for_traces(tmp_path: Path) -> None:
    """SPEC §19: without OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_TRACES_EXPORTER nothing of
    OpenTelemetry is imported, extra installed or not; with it (and the extra) it is."""
    pytest.importorskip("opentelemetry.sdk", reason="the positive case needs the extra genwire[otel]")
    quiet = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with FakeOpenAIServer() as server:
        config = one_model_config(tmp_path, server.url, num_records=3)
        code, modules, stderr = modules_after("run", config, "--json", "--fresh", cwd=tmp_path, env=quiet)
        assert code == 0, stderr
        assert "genwire.engine.report" in modules  # it did run (and wrote its report)
        assert loaded(modules, ["opentelemetry"]) == []
        # The console exporter: traces asked for, nothing to listen on.
        asked = {**quiet, "OTEL_TRACES_EXPORTER": "console"}
        code, modules, stderr = modules_after("run", config, "--json", "--fresh", cwd=tmp_path, env=asked)
        assert code == 0, stderr
        assert "opentelemetry.sdk.trace" in modules


def test_a_rerun_the_response_cache_serves_whole_never_loads_the_http_client(tmp_path: Path) -> None:
    """Every answer from the cache, no request sent: no HTTP client (aiohttp and its TLS
    set-up, a tenth of a second and more; the lean one) is imported; the first run, which
    sent, did import the lean one."""
    with FakeOpenAIServer() as server:
        config = one_model_config(tmp_path, server.url, num_records=3)
        code, modules, stderr = modules_after("run", config, "--json", "--skip-preflight", cwd=tmp_path)
        assert code == 0, stderr
        assert "httptools" in modules and server.requests["writer"] == 3
        server.reset_stats()
        code, modules, stderr = modules_after("run", config, "--json", "--skip-preflight", "--fresh", cwd=tmp_path)
    assert code == 0, stderr
    assert server.total_requests == 0 and "genwire.providers.response_cache" in modules
    assert loaded(modules, ["aiohttp", "httptools"]) == []
