"""A name Jinja resolves itself (its globals, ``self``) is never silently a cell: used
anywhere but as a call, it is read as a column, and no column can have that name, so
``genwire validate`` reports it, located, like any unknown column (exit 2)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from genwire.cli.main import cli
from genwire.config.schema import TEMPLATE_NAMES
from genwire.generators.builtin.common import ENV, template_variables

CONFIG = """
providers:
  nim: {kind: openai, base_url: "http://127.0.0.1:9/v1"}
models:
  writer: {provider: nim, model: w, kind: chat}
pipeline:
  columns:
    - {name: topic, generator: sampler, params: {kind: category, values: [a, b]}}
    - name: out
      generator: GENERATOR
      resources: RESOURCES
      params: PARAMS
"""

SCHEMA = ", schema: {type: object, properties: {x: {type: string}}}"
# Each way a template reaches a row: (generator, resources, params with {T} for the template).
PLACES = {
    "llm-text prompt": ("llm-text", "{model: writer}", '{prompt: "{T}"}'),
    "llm-text system": ("llm-text", "{model: writer}", '{prompt: "hi", system: "{T}"}'),
    "llm-structured prompt": ("llm-structured", "{model: writer}", '{prompt: "{T}"' + SCHEMA + "}"),
    "llm-structured system": ("llm-structured", "{model: writer}", '{prompt: "hi", system: "{T}"' + SCHEMA + "}"),
    "template": ("template", "{}", '{template: "{T}"}'),
}
# range, dict, cycler, joiner, namespace, and lipsum (removed from genwire's environment,
# still a name Jinja users know).
JINJA_GLOBALS = sorted({*ENV.globals, "lipsum"})


def config(place: str, template: str) -> str:
    generator, resources, params = PLACES[place]
    return (
        CONFIG.replace("GENERATOR", generator)
        .replace("RESOURCES", resources)
        .replace("PARAMS", params.replace("{T}", template))
    )


def validate(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["validate", str(path)])
    return result.exit_code, result.stdout + result.stderr


def test_every_jinja_global_is_a_reserved_column_name() -> None:
    # The wiring's "not a column" is only true because no column may be named so.
    assert set(JINJA_GLOBALS) | {"self"} <= TEMPLATE_NAMES
    assert {"range", "dict", "lipsum", "cycler", "joiner", "namespace"} <= set(JINJA_GLOBALS)


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("name", [*JINJA_GLOBALS, "self"])
def test_a_bare_jinja_name_is_a_located_wiring_error(write_config: Callable[..., Path], place: str, name: str) -> None:
    code, text = validate(write_config(config(place, f"{{{{ topic }}}} {{{{ {name} }}}}")))
    assert code == 2, text
    where = "genwire.yaml:12:7 pipeline.columns[1] (out).params"
    assert f"{where}: column 'out' reads {name!r}, which is not a column" in text
    assert "Jinja" in text and "range(3)" in text  # says how Jinja's globals are used
    assert "Traceback" not in text


@pytest.mark.parametrize(
    "template",
    [
        "{{ namespace.count }}",  # an attribute of a global is still not a call
        "{{ topic | default(dict) }}",  # passed as a value
        "{% for c in cycler %}{{ c }}{% endfor %}",
    ],
)
def test_a_jinja_global_used_as_a_value_is_a_wiring_error(write_config: Callable[..., Path], template: str) -> None:
    code, text = validate(write_config(config("template", template)))
    assert code == 2 and "which is not a column" in text, text


@pytest.mark.parametrize("place", sorted(PLACES))
def test_calling_jinja_globals_keeps_working(write_config: Callable[..., Path], place: str) -> None:
    template = (
        "{% set ns = namespace(n=0) %}{% for i in range(2) %}{% set ns.n = ns.n + i %}{% endfor %}"
        "{{ topic }} {{ ns.n }} {{ dict(a=1).a }} {{ cycler('x', 'y').next() }}"
    )
    code, text = validate(write_config(config(place, template)))
    assert code == 0, text


def test_lipsum_is_refused_even_called(write_config: Callable[..., Path]) -> None:
    """lipsum() draws unseeded random text: rows would differ on every run and on resume."""
    code, text = validate(write_config(config("template", "{{ lipsum(1) }}")))
    assert code == 2 and "reads 'lipsum', which is not a column" in text, text


def test_template_variables_lists_bare_globals_and_self_as_reads() -> None:
    assert template_variables("{{ namespace }}") == {"namespace"}
    assert template_variables("{{ self }}") == {"self"}
    assert template_variables("{{ range(3) }} {{ passage.text }}") == {"passage.text"}
    # A local variable named like a global is the template's own.
    assert template_variables("{% set range = [1] %}{{ range }}") == set()
