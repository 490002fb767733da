"""The static check of plugin code (SPEC §15): undeclared slot uses are wiring errors found
in the source before anything runs; dynamic uses and unused declarations are warnings."""

from __future__ import annotations

import dataclasses
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
from genwire.generators.source_check import Finding, Severity, check_generator, check_generators
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
        describe(self.resources)  # HANDED-ON: followed into describe
        json.dumps(self.resources)  # HANDED-AWAY: outside the plugin's package
        return [first, second]


def describe(resources: Any) -> str:
    return repr(resources)  # REPR


class DeclaresNothing(Generator[Any]):
    metadata = GeneratorMetadata(name="declares-nothing", description="x", required_resources={})

    def __init__(self, *, column: str, params: Any, resources: Any, seed: int = 0) -> None:
        super().__init__(column=column, params=params, resources=resources, seed=seed)
        self._embedder = resources.embedder  # kind read where it is used, in generate

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        writer = self.resources.writer
        text = await writer.complete("x")
        return [await self.embed(text) for _ in rows]

    async def embed(self, text: str) -> Any:  # the stored handle's kind is read in another method
        return await self._embedder.embed([text])


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
        line_of("repr(resources)", "REPR"),
        line_of("json.dumps(self.resources)", "HANDED-AWAY"),
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


def test_code_without_source_is_a_note() -> None:
    assert check_generator(Made) == []  # no code of its own: nothing unread
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


def slots_of_method(path: Path, line: int, name: str) -> list[str]:
    """The slots method ``name`` (its ``def`` at ``line``) of ``path`` uses, from the cache."""
    from genwire.generators.source_scan import Entry, Role, file_scan

    summary = file_scan(str(path)).summary(f"{line}:{name}", Entry.of({"self": Role.GEN}))
    assert summary is not None
    return [u.slot for u in summary.uses]


def test_an_edited_file_is_scanned_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genwire.generators import source_scan

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    plugin = tmp_path / "plugin.py"
    plugin.write_text("class A:\n    def f(self):\n        return self.resources.one\n")
    assert slots_of_method(plugin, 2, "f") == ["one"]
    source_scan.save_all()
    plugin.write_text("class A:\n    def f(self):\n        return self.resources.second\n")  # other size
    assert slots_of_method(plugin, 2, "f") == ["second"]
    assert list((tmp_path / "cache" / "genwire" / "source-check").glob("*.json"))


def test_an_unchanged_file_is_read_from_the_disk_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genwire.generators import source_scan

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    plugin = tmp_path / "plugin.py"
    plugin.write_text("class A:\n    def f(self):\n        return self.resources['one']\n")
    assert slots_of_method(plugin, 2, "f") == ["one"]
    source_scan.save_all()
    monkeypatch.setattr(source_scan, "_memory", {})  # a new process: only the disk remains

    def no_parse(*args: Any) -> Any:
        raise AssertionError("parsed again")

    monkeypatch.setattr(source_scan, "scan_source", no_parse)
    monkeypatch.setattr(source_scan.ast, "parse", no_parse)
    assert slots_of_method(plugin, 2, "f") == ["one"]


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


def genwire_cli(
    *args: str, extra_path: str | None = None, cwd: Path | None = None, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(extra_env or {})}
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


def test_lint_checks_a_generator_made_at_run_time(tmp_path: Path) -> None:
    plugin = tmp_path / "made.py"
    plugin.write_text(
        "from genwire.generators import Generator, GeneratorMetadata\n"
        "async def generate(self, rows):\n"
        "    return [self.resources.made_slot for _ in rows]\n"
        'Made = type("Made", (Generator,), {"generate": generate,\n'
        '    "metadata": GeneratorMetadata(name="made", description="x", required_resources={})})\n'
    )
    proc = genwire_cli("lint", "--json", str(plugin))
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["generators"] == ["made"]
    [found] = report["findings"]
    assert (found["severity"], found["slot"], found["line"]) == ("error", "made_slot", 3)


# --- issue 33 item 10: every way the resources reach code, followed or warned about ---------------


def _module_generate(self: Any, rows: list[dict[str, Any]]) -> list[Any]:
    return [self.resources.module_slot for _ in rows]  # MODULE-FUNCTION


class ViaStatic(Generator[Any]):
    metadata = GeneratorMetadata(name="via-static", description="x", required_resources={})

    @staticmethod
    def _pick(gen: Any) -> Any:
        return gen.resources.static_slot  # STATICMETHOD

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [self._pick(self) for _ in rows]


class ViaKwargs(Generator[Any]):
    metadata = GeneratorMetadata(name="via-kwargs", description="x", required_resources={})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._model = kwargs["resources"].kwargs_slot  # KWARGS

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [self._model for _ in rows]


class ViaSuper(Generator[Any]):
    metadata = GeneratorMetadata(name="via-super", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [super().resources.super_slot for _ in rows]  # SUPER


class ViaSelfAlias(Generator[Any]):
    metadata = GeneratorMetadata(name="via-self-alias", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        me = self
        return [me.resources.alias_slot for _ in rows]  # SELF-ALIAS


class ViaGetattrSelf(Generator[Any]):
    metadata = GeneratorMetadata(name="via-getattr-self", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [getattr(self, "resources").getattr_slot for _ in rows]  # noqa: B009  GETATTR-SELF


class ViaModuleFunction(Generator[Any]):
    metadata = GeneratorMetadata(name="via-module-function", description="x", required_resources={})
    generate = _module_generate  # type: ignore[assignment]


class ViaNestedClass(Generator[Any]):
    metadata = GeneratorMetadata(name="via-nested-class", description="x", required_resources={})

    class _Helper:
        def __init__(self, gen: Any) -> None:
            self.gen = gen

        def pick(self) -> Any:
            return self.gen.resources.nested_slot  # NESTED-CLASS

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [self._Helper(self).pick() for _ in rows]


class ViaPropertyLambda(Generator[Any]):
    metadata = GeneratorMetadata(name="via-property-lambda", description="x", required_resources={})
    handle = property(lambda self: self.resources.property_slot)  # PROPERTY-LAMBDA

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [self.handle for _ in rows]


class ViaVars(Generator[Any]):
    metadata = GeneratorMetadata(name="via-vars", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [vars(self)["_resources"].vars_slot for _ in rows]  # VARS


@dataclasses.dataclass
class _Holder:
    gen: Any

    def pick(self) -> Any:
        return self.gen.resources.dataclass_slot  # DATACLASS-HOLDER


class ViaDataclassHolder(Generator[Any]):
    metadata = GeneratorMetadata(name="via-dataclass-holder", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [_Holder(self).pick() for _ in rows]


class ViaLocalClass(Generator[Any]):
    metadata = GeneratorMetadata(name="via-local-class", description="x", required_resources={})

    def __init__(self, *, column: str, params: Any, resources: Any, seed: int = 0) -> None:
        Generator.__init__(self, column=column, params=params, resources=resources, seed=seed)

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        outer = self

        class Local:
            def pick(self) -> Any:
                return outer.resources.local_slot  # LOCAL-CLASS

        return [Local().pick() for _ in rows]


def _stash(gen: Any) -> None:
    gen._stash = gen.resources


class ViaStoredByHelper(Generator[Any]):
    """A helper stores the resources on the generator; a method reads a slot through it."""

    metadata = GeneratorMetadata(name="via-stored-by-helper", description="x", required_resources={})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _stash(self)

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        assert getattr(self, "_stash", None) is not None  # a literal attribute name: nothing to say
        return [self._stash.stored_slot for _ in rows]  # STORED-BY-HELPER


def _logged(fn: Any) -> Any:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:  # no functools.wraps: the method is hidden
        return await fn(*args, **kwargs)

    return wrapper


class ViaOpaqueDecorator(Generator[Any]):
    metadata = GeneratorMetadata(name="via-opaque-decorator", description="x", required_resources={})

    @_logged
    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [self.resources.decorated_slot for _ in rows]  # OPAQUE-DECORATOR


@pytest.mark.parametrize(
    ("cls", "slot", "tag", "text"),
    [
        (ViaStatic, "static_slot", "STATICMETHOD", "gen.resources.static_slot"),
        (ViaKwargs, "kwargs_slot", "KWARGS", 'kwargs["resources"].kwargs_slot'),
        (ViaSuper, "super_slot", "SUPER", "super().resources.super_slot"),
        (ViaSelfAlias, "alias_slot", "SELF-ALIAS", "me.resources.alias_slot"),
        (ViaGetattrSelf, "getattr_slot", "GETATTR-SELF", 'getattr(self, "resources").getattr_slot'),
        (ViaModuleFunction, "module_slot", "MODULE-FUNCTION", "self.resources.module_slot"),
        (ViaNestedClass, "nested_slot", "NESTED-CLASS", "self.gen.resources.nested_slot"),
        (ViaPropertyLambda, "property_slot", "PROPERTY-LAMBDA", "self.resources.property_slot"),
        (ViaVars, "vars_slot", "VARS", 'vars(self)["_resources"].vars_slot'),
        (ViaDataclassHolder, "dataclass_slot", "DATACLASS-HOLDER", "self.gen.resources.dataclass_slot"),
        (ViaLocalClass, "local_slot", "LOCAL-CLASS", "outer.resources.local_slot"),
        (ViaStoredByHelper, "stored_slot", "STORED-BY-HELPER", "self._stash.stored_slot"),
        (ViaOpaqueDecorator, "decorated_slot", "OPAQUE-DECORATOR", "self.resources.decorated_slot"),
    ],
)
def test_a_use_reached_another_way_is_a_located_error(cls: type, slot: str, tag: str, text: str) -> None:
    findings = check_generator(cls)
    [found] = errors(findings)
    assert (found.slot, found.file, found.line) == (slot, HERE, line_of(text, tag))
    assert [f for f in findings if f.severity is not Severity.ERROR] == []


class Escapes(Generator[Any]):
    """Every way out the check cannot follow: each a warning at its line, never silence."""

    metadata = GeneratorMetadata(name="escapes", description="x", required_resources={"model": ResourceKind.CHAT_MODEL})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._copy = dict(kwargs)  # ESCAPE-KWARGS

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        name = "resources"
        found = getattr(self, name)  # ESCAPE-GETATTR
        namespace = vars(self)[name]  # ESCAPE-VARS
        clone = json.dumps(self)  # ESCAPE-CALL
        holders = [self]  # ESCAPE-STORED
        return [found, namespace, clone, holders, self.resources.model]


def test_where_the_generator_escapes_is_a_warning_at_that_line() -> None:
    findings = check_generator(Escapes)
    assert errors(findings) == []
    assert {f.line for f in findings} == {
        line_of("dict(kwargs)", "ESCAPE-KWARGS"),
        line_of("getattr(self, name)", "ESCAPE-GETATTR"),
        line_of("vars(self)[name]", "ESCAPE-VARS"),
        line_of("json.dumps(self)", "ESCAPE-CALL"),
        line_of("[self]", "ESCAPE-STORED"),
    }
    assert all(f.severity is Severity.WARNING for f in findings)


HELPERS = """
def pick(gen):
    return gen.resources.helper_slot

def through(gen, depth=0):
    return pick(gen)

def on_resources(res):
    return res.resources_slot
"""

PACKAGED = """
from genwire.generators import Generator, GeneratorMetadata, ResourceKind

from . import helpers
from .helpers import through

class Packaged(Generator):
    metadata = GeneratorMetadata(name="packaged", description="x", required_resources={})

    async def generate(self, rows):
        first = helpers.on_resources(self.resources)
        return [through(self) for _ in rows] + [first]
"""


@pytest.fixture
def packaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[type, Path]:
    """A plugin package whose generator hands itself to a helper module of its own."""
    import importlib
    import uuid

    name = f"packaged_{uuid.uuid4().hex[:8]}"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text(HELPERS)
    (package / "gen.py").write_text(PACKAGED)
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(f"{name}.gen").Packaged, package


def test_a_helper_in_another_module_of_the_package_is_followed(packaged: tuple[type, Path]) -> None:
    cls, package = packaged
    found = {f.slot: f for f in check_generator(cls)}
    assert set(found) == {"helper_slot", "resources_slot"}
    helpers = str(package / "helpers.py")
    assert (found["helper_slot"].file, found["helper_slot"].line) == (helpers, line_of("gen.resources", "", HELPERS))
    assert (found["resources_slot"].file, found["resources_slot"].line) == (helpers, line_of("res.", "", HELPERS))
    assert all(f.severity is Severity.ERROR for f in found.values())


def test_lint_json_and_boot_report_a_helper_use_alike(packaged: tuple[type, Path]) -> None:
    cls, package = packaged
    report = json.loads(genwire_cli("lint", "--json", f"{package.name}.gen", cwd=package.parent).stdout)
    assert report["ok"] is False
    linted = {(f["file"], f["line"], f["col"], f["slot"]) for f in report["findings"]}
    assert linted == {(f.file, f.line, f.col, f.slot) for f in check_generator(cls)}
    by_path = json.loads(genwire_cli("lint", "--json", str(package / "gen.py")).stdout)  # relative imports work
    assert by_path["findings"] == report["findings"]
    cfg = config("http://127.0.0.1:9/v1", {"name": "a", "generator": "packaged"})
    with pytest.raises(genwire.WiringError) as info:
        genwire.boot(cfg, generators=[cls])
    for file, line, col, slot in linted:
        assert any(p.startswith(f"{file}:{line}:{col}:") and repr(slot) in p for p in info.value.problems)


def test_a_chain_deeper_than_the_check_follows_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from genwire.generators.source_check import MAX_DEPTH

    hops = "\n".join(f"def hop{i}(gen):\n    return hop{i + 1}(gen)\n" for i in range(MAX_DEPTH + 1))
    (tmp_path / "deep_chain_plugin.py").write_text(
        "from genwire.generators import Generator, GeneratorMetadata\n"
        f"{hops}\n"
        f"def hop{MAX_DEPTH + 1}(gen):\n    return gen.resources.deep_slot\n"
        "class Deep(Generator):\n"
        '    metadata = GeneratorMetadata(name="deep", description="x", required_resources={})\n'
        "    async def generate(self, rows):\n"
        "        return [hop0(self) for _ in rows]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    [found] = check_generator(importlib.import_module("deep_chain_plugin").Deep)
    assert found.severity is Severity.WARNING and "calls deep" in found.message
    assert found.line is not None and found.line > 1


# --- issue 33 item 11: a subclass is checked through what it resolves, not the bodies it replaces ----


class JudgedWriter(Generator[Any]):
    metadata = GeneratorMetadata(
        name="judged-writer",
        description="x",
        required_resources={"model": ResourceKind.CHAT_MODEL, "judge": ResourceKind.CHAT_MODEL},
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        drafts = [await self.resources.model.complete(str(r)) for r in rows]
        return [await self.resources.judge.complete(d) for d in drafts]  # PARENT-JUDGE


class PlainWriter(JudgedWriter):
    """Drops the judge: overrides generate, declares only its model."""

    metadata = GeneratorMetadata(
        name="plain-writer", description="x", required_resources={"model": ResourceKind.CHAT_MODEL}
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [await self.resources.model.complete(str(r)) for r in rows]


class DelegatingWriter(PlainWriter):
    """Calls the grandparent's body through super() twice removed: that body runs, so it counts."""

    metadata = GeneratorMetadata(
        name="delegating-writer", description="x", required_resources={"model": ResourceKind.CHAT_MODEL}
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await JudgedWriter.generate(self, rows)


class SuperWriter(JudgedWriter):
    """Extends the parent's body through super(): that body runs, so its judge counts."""

    metadata = GeneratorMetadata(
        name="super-writer", description="x", required_resources={"model": ResourceKind.CHAT_MODEL}
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [*(await super().generate(rows)), await self.resources.model.complete("x")]


def test_a_subclass_is_checked_through_its_mro_not_the_overridden_bodies() -> None:
    assert check_generator(PlainWriter) == []
    assert_declarations_match(PlainWriter)
    for delegating in (DelegatingWriter, SuperWriter):
        [found] = check_generator(delegating)
        assert (found.severity, found.slot, found.line) == (
            Severity.ERROR,
            "judge",
            line_of("self.resources.judge", "PARENT-JUDGE"),
        )


# --- issue 33 item 12: the cache is keyed by content, not size and mtime ------------------------------


def test_an_edit_keeping_size_and_mtime_is_seen(tmp_path: Path) -> None:
    plugin = tmp_path / "kept.py"
    plugin.write_text(textwrap.dedent(JUDGE_PLUGIN))
    env_cache = str(tmp_path / "cache")
    first = genwire_cli("lint", "--json", str(plugin), extra_env={"XDG_CACHE_HOME": env_cache})
    assert [f["slot"] for f in json.loads(first.stdout)["findings"]] == ["judge"]
    stat = plugin.stat()
    edited = tmp_path / "edited.py"  # what `cp -p edited.py kept.py` leaves: same size, same mtime
    edited.write_text(textwrap.dedent(JUDGE_PLUGIN).replace("resources.judge", "resources.juror"))
    assert edited.stat().st_size == stat.st_size
    plugin.write_bytes(edited.read_bytes())
    os.utime(plugin, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (plugin.stat().st_size, plugin.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    second = genwire_cli("lint", "--json", str(plugin), extra_env={"XDG_CACHE_HOME": env_cache})
    assert [f["slot"] for f in json.loads(second.stdout)["findings"]] == ["juror"]
