"""Every code block of the docs (and the README) that is a config or a command is checked,
so the docs cannot show a key or an option that does not exist:

* ``yaml``: a genwire config. A whole file (with ``pipeline:``) must pass ``genwire
  validate`` and the JSON Schema; a part of one (a ``providers:`` section, a list of
  columns) is set into a minimal pipeline and must pass genwire's loader and the schema.
  A block titled with another file's name (``title="model_configs.yaml"``) is only parsed.
* ``bash``: each ``genwire ...`` command is parsed by the click commands themselves (an
  unknown command or option, a bad value, a missing argument fail); ``validate`` and
  ``plan`` of a file in the repository are run.
* ``python`` compiles, ``toml`` and ``json`` parse (``json`` may shorten itself with ``...``).
* Every block names its language (``text`` for output), so none escapes these checks."""

from __future__ import annotations

import json
import re
import shlex
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
from click.testing import CliRunner

from genwire.cli.main import cli
from genwire.config.json_schema import config_schema
from genwire.config.loader import parse_yaml, validate_data

REPO = Path(__file__).parent.parent
PAGES = [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
LANGUAGES = {"bash", "yaml", "json", "python", "toml", "text"}
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>.*)$")
ENV_REF = re.compile(r"\$\{(\w+)")
# A minimal pipeline a config fragment is set into.
BASE: dict[str, Any] = {"pipeline": {"columns": [{"name": "x", "generator": "sampler", "params": {"kind": "uuid"}}]}}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    title: str | None
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        start: int | None = None
        for number, line in enumerate(lines, 1):
            match = FENCE.match(line)
            if not match:
                continue
            if start is None:
                start, info, indent = number, match["info"].strip(), len(match["indent"])
                continue
            body = textwrap.dedent("\n".join(lines[start:number - 1])) if indent else "\n".join(lines[start:number - 1])
            title = re.search(r'title="([^"]+)"', info)
            found.append(Block(page, start, info.split()[0] if info else "", title and title[1], body + "\n"))
            start = None
        assert start is None, f"{page}:{start}: a code block is never closed"
    return found


BLOCKS = blocks()


def of(language: str) -> list[Block]:
    return [b for b in BLOCKS if b.language == language]


def test_every_block_names_its_language() -> None:
    assert len(BLOCKS) > 40
    assert [b.where for b in BLOCKS if b.language not in LANGUAGES] == []


def _env(text: str) -> dict[str, str]:
    return {name: f"dummy-{name.lower()}" for name in ENV_REF.findall(text)}


def _schema_problems(data: Any) -> list[str]:
    checker = jsonschema.Draft202012Validator(config_schema())
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in checker.iter_errors(data)]


@pytest.mark.parametrize("block", of("yaml"), ids=lambda b: b.where)
def test_yaml_blocks_are_valid_genwire_configs(block: Block, tmp_path: Path) -> None:
    if block.title and block.title != "genwire.yaml":  # another program's file: it parses
        parse_yaml(block.text, block.where, substitute=False)
        return
    data, _ = parse_yaml(block.text, block.where, _env(block.text))
    if isinstance(data, dict) and "pipeline" in data:
        config = tmp_path / "genwire.yaml"
        config.write_text(block.text, encoding="utf-8")
        result = CliRunner(env=_env(block.text)).invoke(cli, ["validate", str(config)])
        assert result.exit_code == 0, f"{block.where}: {result.output}"
    else:
        if isinstance(data, list):  # columns
            data = {"pipeline": {"columns": [*BASE["pipeline"]["columns"], *data]}}
        assert isinstance(data, dict), f"{block.where}: neither a config, a part of one nor columns"
        data = {**BASE, **data}
        validate_data(data, block.where, tmp_path)  # genwire's loader: raises ConfigError, located
    assert _schema_problems(data) == [], block.where


def _commands(text: str) -> list[list[str]]:
    """The ``genwire ...`` commands of a bash block: comments dropped, ``VAR=value``
    prefixes skipped, ``&&`` / ``;`` / ``|`` chains split."""
    found = []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        command: list[str] = []
        for word in [*words, "&&"]:
            if word in ("&&", ";", "|", "||", "&"):
                while command and re.match(r"^\w+=", command[0]):
                    command.pop(0)
                if command and command[0] == "genwire":
                    found.append(command[1:])
                command = []
            else:
                command.append(word)
    return found


def click_parse(args: list[str]) -> None:
    """Parse a command line the way ``genwire`` would, without running the command:
    click raises a UsageError for an unknown command or option, a bad value, a missing
    argument; option callbacks (the output's suffix) run too."""
    command: click.Command = cli
    ctx = command.make_context("genwire", list(args))
    while isinstance(command, click.Group):
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        if not rest:  # ``genwire cache`` alone: shows the group's help
            return
        name, sub, rest = command.resolve_command(ctx, rest)
        assert name is not None and sub is not None
        ctx = sub.make_context(name, rest, parent=ctx)
        command = sub


COMMANDS = [(b, c) for b in of("bash") for c in _commands(b.text)]


def test_the_docs_show_every_command() -> None:
    shown = {c[0] for _, c in COMMANDS if c}
    assert shown >= {"init", "validate", "plan", "plugins", "preflight", "run", "batches", "lint", "cache", "schema"}


@pytest.mark.parametrize(("block", "args"), COMMANDS, ids=[f"{b.where} genwire {' '.join(c)}" for b, c in COMMANDS])
def test_genwire_commands_in_bash_blocks_parse(block: Block, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        click_parse(args)
    except click.exceptions.Exit:  # --help, --version
        pass
    except click.UsageError as exc:
        pytest.fail(f"{block.where}: genwire {' '.join(args)}: {exc.format_message()}")
    on_repo_file = len(args) > 1 and args[0] in ("validate", "plan") and (REPO / args[1]).is_file()
    if on_repo_file:
        monkeypatch.chdir(REPO)
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, f"{block.where}: genwire {' '.join(args)}: {result.output}"


def test_click_parse_refuses_what_genwire_refuses() -> None:
    click_parse(["run", "genwire.yaml", "-n", "5", "-o", "out/x.jsonl", "--engine", "ray"])
    for bad in (
        ["run", "genwire.yaml", "--bogus"],
        ["run", "genwire.yaml", "-o", "out.txt"],
        ["run", "genwire.yaml", "-n", "0"],
        ["plan", "genwire.yaml", "--format", "svg"],
        ["nosuchcommand"],
        ["cache", "wipe"],
        ["lint"],
    ):
        with pytest.raises(click.UsageError):
            click_parse(bad)


@pytest.mark.parametrize("block", of("python"), ids=lambda b: b.where)
def test_python_blocks_compile(block: Block) -> None:
    import ast

    compile(block.text, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.mark.parametrize("block", of("toml"), ids=lambda b: b.where)
def test_toml_blocks_parse(block: Block) -> None:
    tomllib.loads(block.text)


@pytest.mark.parametrize("block", of("json"), ids=lambda b: b.where)
def test_json_blocks_parse(block: Block) -> None:
    if "..." not in block.text:
        json.loads(block.text)
