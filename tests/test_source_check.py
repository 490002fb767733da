"""The static check of plugin code (SPEC §15): undeclared slot uses are wiring errors found
in the source before anything runs; dynamic uses and unused declarations are warnings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import genwire
from genwire.generators import Generator, GeneratorMetadata, ResourceKind
from genwire.generators.discovery import discover
from genwire.generators.source_check import Finding, Severity, check_generator, check_generators, file_scans
from genwire.testing import FakeOpenAIServer, assert_declarations_match

HERE = str(Path(__file__).resolve())


def line_of(text: str, needle: str, source: str | None = None) -> int:
    """1-based line of the first line of ``source`` (this file by default) holding ``needle``."""
    lines = (source if source is not None else Path(HERE).read_text()).splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line and text in line)


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR]


# --- plugins checked in-process (their source is this file) --------------------------------------


class Clean(Generator[Any]):
    metadata = GeneratorMetadata(
        name="clean-plugin",
        description="uses exactly what it declares",
        required_resources={"writer": ResourceKind.CHAT_MODEL, "embedder": ResourceKind.EMBEDDING_MODEL},
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        vectors = await self.resources.embedder.embed([str(r) for r in rows])
        return [await self.resources["writer"].complete(str(len(v))) for v in vectors]


class RareJudge(Generator[Any]):
    metadata = GeneratorMetadata(
        name="rare-judge", description="judges long texts only", required_resources={"model": ResourceKind.CHAT_MODEL}
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        out = []
        for row in rows:
            text = await self.resources.model.complete(str(row))
            if len(text) > 10_000:  # the rare branch no test reaches
                text = await self.resources.judge.complete(text)  # RARE-JUDGE
            out.append(text)
        return out


class Uses(Generator[Any]):
    """Every literal form, each of an undeclared slot."""

    metadata = GeneratorMetadata(name="uses", description="x", required_resources={})

    def lookup(self) -> Any:
        r = self.resources
        alias = r  # an alias of an alias
        return r.via_alias, alias["via_alias_subscript"]  # ALIAS

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        if "via_in" in self.resources:  # IN
            pass
        values = [self.resources["via_subscript"] for _ in rows]  # SUBSCRIPT
        later = lambda: self.resources.via_lambda  # noqa: E731  LAMBDA

        def nested() -> Any:
            return getattr(self.resources, "via_getattr")  # noqa: B009  GETATTR

        return [values, later, nested]


class Inheriting(Uses):
    """Its own code is clean; what it inherits is not."""

    metadata = GeneratorMetadata(name="inheriting", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [self.lookup() for _ in rows]


class Dynamic(Generator[Any]):
    metadata = GeneratorMetadata(name="dynamic", description="x", required_resources={"model": ResourceKind.CHAT_MODEL})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        name = "model"
        first = getattr(self.resources, name)  # GETATTR-DYNAMIC
        second = self.resources[name]  # SUBSCRIPT-DYNAMIC
        describe(self.resources)  # HANDED-ON
        return [first, second]


def describe(resources: Any) -> str:
    return repr(resources)


class DeclaresNothing(Generator[Any]):
    metadata = GeneratorMetadata(name="declares-nothing", description="x", required_resources={})

    def __init__(self, *, column: str, params: Any, resources: Any, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._embedder = resources.embedder  # kind read where it is used, in generate

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        writer = self.resources.writer
        text = await writer.complete("x")
        return [await self._embedder.embed([text]) for _ in rows]


class Kinds(Generator[Any]):
    metadata = GeneratorMetadata(name="kinds", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        async for row in self.resources.corpus.rows():
            rows.append(row)
        return [
            self.resources.registry.get("a"),
            self.resources.width.dimensions,
            len(self.resources.table),
            self.resources.mystery,
        ]


class Unused(Generator[Any]):
    metadata = GeneratorMetadata(
        name="unused",
        description="x",
        required_resources={
            "model": ResourceKind.CHAT_MODEL,
            "judge": ResourceKind.CHAT_MODEL,  # UNUSED-DECLARATION
        },
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [await self.resources.model.complete("x") for _ in rows]


Made = type(
    "Made",
    (Generator,),
    {"metadata": GeneratorMetadata(name="made", description="x", required_resources={})},
)


# --- the check itself ------------------------------------------------------------------------------


def test_a_clean_plugin_has_no_finding() -> None:
    assert check_generator(Clean) == []
    assert_declarations_match(Clean)


def test_the_rare_branch_use_is_a_located_error_with_the_entry_to_add() -> None:
    [found] = check_generator(RareJudge)
    assert found.severity is Severity.ERROR and found.slot == "judge" and found.generator == "rare-judge"
    assert (found.file, found.line) == (HERE, line_of("self.resources.judge", "RARE-JUDGE"))
    assert found.col == Path(HERE).read_text().splitlines()[found.line - 1].index("self.resources.judge") + 1
    assert found.suggested_entry == '"judge": ResourceKind.CHAT_MODEL'
    assert 'add "judge": ResourceKind.CHAT_MODEL to required_resources' in found.message


def test_subscript_in_alias_lambda_nested_and_getattr_uses_are_found() -> None:
    found = {f.slot: f for f in check_generator(Uses)}
    assert set(found) == {
        "via_alias",
        "via_alias_subscript",
        "via_in",
        "via_subscript",
        "via_lambda",
        "via_getattr",
    }
    assert all(f.severity is Severity.ERROR for f in found.values())
    assert found["via_in"].line == line_of("in self.resources", "# IN")
    assert found["via_alias_subscript"].line == line_of('alias["via_alias_subscript"]', "ALIAS")


def test_a_use_in_an_inherited_method_is_found() -> None:
    slots = {f.slot for f in errors(check_generator(Inheriting))}
    assert {"via_alias", "via_alias_subscript"} <= slots
    assert all(f.generator == "inheriting" for f in check_generator(Inheriting))


def test_dynamic_uses_are_warnings_naming_the_line() -> None:
    findings = check_generator(Dynamic)
    assert errors(findings) == []
    lines = {f.line for f in findings if f.severity is Severity.WARNING}
    assert lines == {
        line_of("getattr(self.resources, name)", "GETATTR-DYNAMIC"),
        line_of("self.resources[name]", "SUBSCRIPT-DYNAMIC"),
        line_of("describe(self.resources)", "HANDED-ON"),
    }


def test_a_plugin_declaring_nothing_gets_each_entry_with_its_kind() -> None:
    entries = {f.suggested_entry for f in errors(check_generator(DeclaresNothing))}
    assert entries == {'"writer": ResourceKind.CHAT_MODEL', '"embedder": ResourceKind.EMBEDDING_MODEL'}


def test_the_kind_is_read_from_the_use_or_said_to_be_unknown() -> None:
    found = {f.slot: f for f in check_generator(Kinds)}
    assert found["corpus"].suggested_entry == '"corpus": ResourceKind.DATASET'
    assert found["registry"].suggested_entry == '"registry": ResourceKind.MODEL_REGISTRY'
    assert found["width"].suggested_entry == '"width": ResourceKind.EMBEDDING_MODEL'
    assert found["table"].suggested_entry == '"table": ResourceKind.DATASET'
    assert found["mystery"].suggested_entry == '"mystery": ResourceKind.<KIND>'
    assert "cannot be read from its uses" in found["mystery"].message


def test_a_declared_slot_no_code_uses_is_a_warning_at_its_declaration() -> None:
    [found] = check_generator(Unused)
    assert found.severity is Severity.WARNING and found.slot == "judge"
    assert found.line == line_of('"judge": ResourceKind.CHAT_MODEL', "UNUSED-DECLARATION")


def test_a_class_without_source_is_a_note() -> None:
    [found] = check_generator(Made)
    assert found.severity is Severity.NOTE and "made at run time" in found.message
    namespace: dict[str, Any] = {}
    exec(  # a class whose code exists nowhere on disk
        textwrap.dedent(
            """
            from genwire.generators import Generator, GeneratorMetadata
            class Execd(Generator):
                metadata = GeneratorMetadata(name="execd", description="x", required_resources={})
                async def generate(self, rows):
                    return [self.resources.anything for _ in rows]
            """
        ),
        namespace,
    )
    [note] = check_generator(namespace["Execd"])
    assert note.severity is Severity.NOTE and "no Python source" in note.message


def test_the_built_in_generators_pass_their_own_lint() -> None:
    found = discover()
    builtins = [cls for cls in found.generators.values() if cls.__module__.startswith("genwire.generators.builtin")]
    assert len(builtins) >= 8
    assert check_generators(builtins) == []
    for cls in builtins:
        assert_declarations_match(cls)


def test_assert_declarations_match_raises_with_the_findings() -> None:
    with pytest.raises(AssertionError, match=r'rare-judge.*add "judge": ResourceKind.CHAT_MODEL'):
        assert_declarations_match(RareJudge)
    with pytest.raises(AssertionError, match="no code uses"):
        assert_declarations_match(Unused)
    assert_declarations_match(Unused, strict=False)  # warnings only


def test_an_edited_file_is_scanned_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    plugin = tmp_path / "plugin.py"
    plugin.write_text("class A:\n    def f(self):\n        return self.resources.one\n")
    assert [u.slot for u in file_scans(str(plugin))[0].uses] == ["one"]
    plugin.write_text("class A:\n    def f(self):\n        return self.resources.second\n")  # other size
    assert [u.slot for u in file_scans(str(plugin))[0].uses] == ["second"]
    assert list((tmp_path / "cache" / "genwire" / "source-check").glob("*.json"))


def test_an_unchanged_file_is_read_from_the_disk_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genwire.generators import source_check

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    plugin = tmp_path / "plugin.py"
    plugin.write_text("class A:\n    def f(self):\n        return self.resources['one']\n")
    file_scans(str(plugin))
    monkeypatch.setattr(source_check, "_memory", {})  # a new process: only the disk remains

    def no_parse(*args: Any) -> Any:
        raise AssertionError("parsed again")

    monkeypatch.setattr(source_check, "scan_source", no_parse)
    assert [u.slot for u in file_scans(str(plugin))[0].uses] == ["one"]


# --- at boot, with the other wiring errors -----------------------------------------------------------


def config(base_url: str, *columns: dict[str, Any]) -> dict[str, Any]:
    return {
        "providers": {"srv": {"kind": "openai", "base_url": base_url}},
        "models": {
            "writer": {"provider": "srv", "model": "w", "kind": "chat"},
            "embedder": {"provider": "srv", "model": "e", "kind": "embedding", "dimensions": 8},
        },
        "pipeline": {"num_records": 2, "columns": list(columns)},
    }


def test_boot_lists_undeclared_uses_with_the_other_wiring_errors() -> None:
    cfg = config(
        "http://127.0.0.1:9/v1",
        {"name": "a", "generator": "rare-judge", "resources": {"model": "writer"}},
        {"name": "b", "generator": "llm-text", "resources": {"model": "wrtier"}, "params": {"prompt": "x"}},
        {"name": "c", "generator": "declares-nothing"},
    )
    with pytest.raises(genwire.WiringError) as info:
        genwire.boot(cfg, generators=[RareJudge, DeclaresNothing])
    problems = info.value.problems
    judge = line_of("self.resources.judge", "RARE-JUDGE")
    assert any("unknown resource 'wrtier'" in p for p in problems)
    assert any(
        p.startswith(f"{HERE}:{judge}:")
        and "'rare-judge' (column 'a')" in p
        and 'add "judge": ResourceKind.CHAT_MODEL to required_resources' in p
        for p in problems
    )
    assert sum("'declares-nothing'" in p for p in problems) == 2


def test_a_clean_plugin_boots_with_no_finding_and_warnings_reach_the_plan() -> None:
    cfg = config(
        "http://127.0.0.1:9/v1",
        {"name": "a", "generator": "clean-plugin", "resources": {"writer": "writer", "embedder": "embedder"}},
        {"name": "b", "generator": "dynamic", "resources": {"model": "writer"}},
    )
    container = genwire.boot(cfg, generators=[Clean, Dynamic])
    plan = container.plan()
    assert {f.generator for f in plan.findings} == {"dynamic"}
    assert all(f.severity is Severity.WARNING for f in plan.findings)
    assert json.loads(plan.model_dump_json())["findings"][0]["line"] == line_of("getattr(self", "GETATTR-DYNAMIC")


# --- the command line ------------------------------------------------------------------------------------

JUDGE_PLUGIN = """
from genwire.generators import Generator, GeneratorMetadata, ResourceKind

class Judged(Generator):
    metadata = GeneratorMetadata(
        name="judged", description="x", required_resources={"model": ResourceKind.CHAT_MODEL}
    )

    async def generate(self, rows):
        out = []
        for row in rows:
            text = await self.resources.model.complete("write")
            if len(text) > 10_000:
                text = await self.resources.judge.complete(text)
            out.append(text)
        return out
"""


def genwire_cli(*args: str, extra_path: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "genwire.cli.main", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def test_validate_preflight_and_run_stop_before_any_request(
    install_plugin: Callable[..., None], write_config: Callable[[str], Path], fake_openai_server: FakeOpenAIServer
) -> None:
    install_plugin("judged-plugin", "judged_plugin", JUDGE_PLUGIN, {"judged": "judged_plugin:Judged"})
    site = str(Path(write_config("{}", "x.yaml")).parent / "site-judged-plugin")
    path = write_config(
        f"""
        providers:
          srv: {{kind: openai, base_url: "{fake_openai_server.url}"}}
        models:
          writer: {{provider: srv, model: w, kind: chat}}
        pipeline:
          num_records: 2
          columns:
            - {{name: a, generator: judged, resources: {{model: writer}}}}
        """
    )
    line = line_of("self.resources.judge", "", textwrap.dedent(JUDGE_PLUGIN))
    plugin_file = str(Path(site) / "judged_plugin.py")
    for args in (["validate"], ["plan"], ["preflight", "--json"], ["run", "-o", str(path.parent / "o.jsonl")]):
        proc = genwire_cli(*args, str(path), extra_path=site)
        assert proc.returncode == 2, (args, proc.stderr)
        assert f"{plugin_file}:{line}:" in proc.stderr and "'judge'" in proc.stderr
        assert 'add "judge": ResourceKind.CHAT_MODEL to required_resources' in proc.stderr
        assert "Traceback" not in proc.stderr
    assert json.loads(genwire_cli("preflight", "--json", str(path), extra_path=site).stdout)["ok"] is False
    assert fake_openai_server.total_requests == 0
    # The same pipeline with the entry added is sent to the server: the server was reachable.
    Path(plugin_file).write_text(
        textwrap.dedent(JUDGE_PLUGIN).replace('{"model"', '{"judge": ResourceKind.CHAT_MODEL, "model"')
    )
    path.write_text(path.read_text().replace("{model: writer}", "{model: writer, judge: writer}"))
    assert genwire_cli("preflight", str(path), extra_path=site).returncode == 0
    assert fake_openai_server.total_requests > 0


def test_validate_prints_warnings_and_stays_valid(
    install_plugin: Callable[..., None], write_config: Callable[[str], Path]
) -> None:
    source = JUDGE_PLUGIN.replace("self.resources.judge", 'getattr(self.resources, "ju" + "dge")')
    install_plugin("dyn-plugin", "dyn_plugin", source, {"judged": "dyn_plugin:Judged"})
    site = str(Path(write_config("{}", "x.yaml")).parent / "site-dyn-plugin")
    path = write_config(
        """
        providers:
          srv: {kind: openai, base_url: "http://127.0.0.1:9/v1"}
        models:
          writer: {provider: srv, model: w, kind: chat}
        pipeline:
          columns:
            - {name: a, generator: judged, resources: {model: writer}}
        """
    )
    proc = genwire_cli("validate", str(path), extra_path=site)
    assert proc.returncode == 0, proc.stderr
    line = line_of("getattr(self.resources", "", textwrap.dedent(source))
    assert f"warning: {Path(site) / 'dyn_plugin.py'}:{line}:" in proc.stderr
    assert "valid" in proc.stdout
    plan = genwire_cli("plan", "--format", "json", str(path), extra_path=site)
    assert json.loads(plan.stdout)["findings"][0]["severity"] == "warning"


def test_lint_exit_codes_and_json(tmp_path: Path) -> None:
    bad = tmp_path / "judged.py"
    bad.write_text(textwrap.dedent(JUDGE_PLUGIN))
    good = tmp_path / "good.py"
    good.write_text(textwrap.dedent(JUDGE_PLUGIN).replace("self.resources.judge", "self.resources.model"))
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n")

    proc = genwire_cli("lint", str(bad))
    assert proc.returncode == 1
    line = line_of("self.resources.judge", "", textwrap.dedent(JUDGE_PLUGIN))
    assert f"error: {bad}:{line}:" in proc.stdout and "checked 1 generator (judged)" in proc.stdout

    report = json.loads(genwire_cli("lint", "--json", str(bad), str(good)).stdout)
    assert report["ok"] is False and report["generators"] == ["judged", "judged"]
    [finding] = report["findings"]
    assert finding["file"] == str(bad) and finding["line"] == line and finding["col"] > 1
    assert finding["slot"] == "judge" and finding["severity"] == "error" and finding["generator"] == "judged"
    assert finding["suggested_entry"] == '"judge": ResourceKind.CHAT_MODEL' and finding["message"]

    assert genwire_cli("lint", str(good)).returncode == 0
    # A dotted module name, imported from the working directory as `python -m` would.
    assert genwire_cli("lint", "--json", "good", cwd=tmp_path).returncode == 0
    assert genwire_cli("lint", "genwire.generators.builtin.hard_negatives").returncode == 0

    for args, says in (
        ([str(tmp_path / "missing.py")], "no such file"),
        ([str(broken)], "No module named 'not_a_module_anywhere'"),
        (["no_such_module_xyz"], "import failed"),
    ):
        proc = genwire_cli("lint", *args)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    failed = genwire_cli("lint", "--json", str(tmp_path / "missing.py"))
    assert failed.returncode == 2 and json.loads(failed.stdout)["ok"] is False


def test_lint_notes_a_generator_made_at_run_time(tmp_path: Path) -> None:
    plugin = tmp_path / "made.py"
    plugin.write_text(
        "from genwire.generators import Generator, GeneratorMetadata\n"
        "async def generate(self, rows):\n"
        "    return rows\n"
        'Made = type("Made", (Generator,), {"generate": generate,\n'
        '    "metadata": GeneratorMetadata(name="made", description="x", required_resources={})})\n'
    )
    proc = genwire_cli("lint", "--json", str(plugin))
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["generators"] == ["made"]
    assert [f["severity"] for f in report["findings"]] == ["note"]
