"""Control and bidi characters in names (issue 33 item 16): a newline or U+202E in a column
or alias name is escaped in every location and table cell, never printed raw."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from support import cli

from genwire.cli.render import preflight_table
from genwire.generators.source_check import Finding, Severity
from genwire.preflight.report import CheckResult, PreflightReport

RAW = ("\n", "\r", "\x1b", "\u202e", "\u2066", "\u200f", "\u2028", "\ufeff")


def test_printable_escapes_control_and_bidi_characters_only() -> None:
    from genwire.errors import printable

    assert printable("a\nb\tc\rd") == "a\\nb\\tc\\rd"
    assert printable("x\u202ey\u2066z\x1b[31m\x00") == "x\\u202ey\\u2066z\\x1b[31m\\x00"
    assert printable("\u2028\ufeff\U000e0001") == "\\u2028\\ufeff\\U000e0001"
    assert printable("plain, é, 中文, space and NBSP\u00a0") == "plain, é, 中文, space and NBSP\u00a0"


def test_locations_in_config_errors_escape_names(tmp_path: Path) -> None:
    path = tmp_path / "genwire.yaml"
    path.write_text(
        "models:\n"
        '  "a\\nb\\u202ec": {provider: p, model: m, kind: chat}\n'
        "pipeline:\n"
        "  columns:\n"
        '    - {name: "x\\ny\\u2066", generator: template, params: {template: x}}\n',
        encoding="utf-8",
    )
    result = cli("validate", path)
    assert result.returncode == 2
    assert not any(ch in result.stderr.rstrip("\n").replace("\n  ", "") for ch in RAW), repr(result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 3, lines  # the heading and one line per problem: no name broke a line
    assert "genwire.yaml:2:3 models.a\\nb\\u202ec: got 'a\\nb\\u202ec'" in lines[1]
    assert "genwire.yaml:5:8 pipeline.columns[0] (x\\ny\\u2066).name: got 'x\\ny\\u2066'" in lines[2]


def test_table_cells_escape_names_and_messages() -> None:
    check = CheckResult(
        target="writer\n\u202eevil",
        kind="chat_model",
        aliases=["writer\n\u202eevil", "alias\u2066x"],
        status="failed",
        error_class=None,
        message="line one\nline two \x1b[31mred",
        latency_s=0.01,
        attempts=1,
        used_by=["col\u200fumn"],
    )
    console = Console(file=io.StringIO(), width=400, color_system=None)
    console.print(preflight_table(PreflightReport(ok=False, duration_s=0.1, checks=[check])))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert not any(ch in text.replace("\n", "") for ch in RAW), repr(text)
    assert len(text.splitlines()) == 6  # title, header, one row and three rules: nothing broke a row
    for shown in ("writer\\n\\u202eevil", "alias\\u2066x", "col\\u200fumn", "line one\\nline two \\x1b[31mred"):
        assert shown in text


def test_a_static_check_location_escapes_the_file_name() -> None:
    finding = Finding(
        severity=Severity.ERROR, generator="g", file="plug\nin\u202e.py", line=3, col=1, slot="x", message="m"
    )
    assert finding.text() == "plug\\nin\\u202e.py:3:1: generator 'g': m"
