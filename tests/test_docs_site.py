"""The documentation site builds with ``mkdocs build --strict`` (a broken link or anchor,
a page missing from the nav, fails), works without a network, and its generated pages
and the troubleshooting page keep up with the code."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import genwire.errors
import genwire.preflight.report

REPO = Path(__file__).parent.parent


def generate_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_docs", REPO / "scripts" / "generate_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strict_and_needs_no_network(tmp_path: Path) -> None:
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    pages = sorted(site.rglob("*.html"))
    assert {p.relative_to(site).as_posix() for p in pages} >= {
        "index.html",
        "getting-started.html",
        "concepts/wiring.html",
        "reference/configuration.html",
        "reference/cli.html",
        "troubleshooting.html",
        "architecture.html",
    }
    # Nothing the browser would fetch from elsewhere: scripts, styles, fonts, images.
    remote = re.compile(r'<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)="(?:https?:)?//[^"]*"')
    fetched = {p.name: remote.findall(p.read_text(encoding="utf-8")) for p in pages}
    assert {name: found for name, found in fetched.items() if found} == {}


def test_every_page_is_in_the_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    pages = {p.relative_to(REPO / "docs").as_posix() for p in (REPO / "docs").rglob("*.md")}
    assert {p for p in pages if f" {p}\n" not in nav} == set()


def test_the_generated_pages_and_schemas_are_current() -> None:
    stale = [str(p.relative_to(REPO)) for p in generate_docs().stale()]
    assert stale == [], "run python scripts/generate_docs.py and commit the result"


def test_the_cli_reference_names_every_command_and_option() -> None:
    import click

    from genwire.cli.main import cli

    page = generate_docs().cli_page()
    for name in cli.list_commands(click.Context(cli)):
        assert f"## `genwire {name}`" in page
    run = cli.get_command(click.Context(cli), "run")
    assert run is not None
    for option in run.params:
        if isinstance(option, click.Option) and "--help" not in option.opts:
            assert f"`{option.opts[0]}" in page, option.opts


def test_troubleshooting_covers_every_error_class() -> None:
    page = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    headings = set(re.findall(r"^###+ `(\w+)`", page, re.M))
    exceptions = {
        name
        for module in (genwire.errors, genwire.preflight.report)
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, genwire.errors.GenwireError)
    }
    exceptions -= {"GenwireError", "ProblemsError"}  # the bases: the page's introduction
    classes = {c.value for c in genwire.errors.ErrorClass} | {"unwritable"}
    assert exceptions - headings == set(), "add a section to docs/troubleshooting.md"
    assert classes - headings == set(), "add a section to docs/troubleshooting.md"
