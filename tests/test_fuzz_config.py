"""Bad configuration, fuzzed: every mutation of a valid config either still boots or ends
in ConfigError/WiringError whose every problem carries a location, quickly and without
blowing up memory. The CLI turns each into exit 2 and one message, never a traceback."""

from __future__ import annotations

import re
import time
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import genwire
from genwire.cli.main import cli

BASE = Path(__file__).parent.parent / "examples" / "retrieval" / "genwire.yaml"
VALID = BASE.read_text().replace("path: ./docs", f"path: {BASE.parent / 'docs'}")
LINES = VALID.splitlines()
LOCATION = re.compile(r"^\S+\.yaml(:\d+:\d+)?[: ]")

SCALARS = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20),
    st.sampled_from(
        [
            "[",
            "]",
            "{",
            "}",
            ": x",
            "- y",
            "&a",
            "*a",
            "!!python/object:os.system",
            "${NOPE_VAR}",
            "${X:-}",
            "'",
            '"',
            "|",
            ">",
            "%TAG",
            "---",
            "...",
            "\t",
            "<<: *a",
            "~",
            "0x1f",
            "1e400",
        ]
    ),
)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    lines = list(LINES)
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(
            st.sampled_from(
                ["replace_value", "delete", "duplicate", "unknown_key", "garbage", "indent", "env", "bytes"]
            )
        )
        line = lines[i]
        if op == "replace_value" and ":" in line:
            key = line.split(":", 1)[0]
            lines[i] = f"{key}: {draw(SCALARS)!s}"
        elif op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, line)
        elif op == "unknown_key":
            indent = len(line) - len(line.lstrip())
            lines.insert(i, " " * indent + draw(st.from_regex(r"[a-z_]{1,12}", fullmatch=True)) + ": 1")
        elif op == "garbage":
            pos = draw(st.integers(0, len(line)))
            lines[i] = line[:pos] + str(draw(SCALARS)) + line[pos:]
        elif op == "indent":
            lines[i] = " " * draw(st.integers(0, 9)) + line.lstrip()
        elif op == "env" and ":" in line:
            lines[i] = (
                line.split(":", 1)[0] + ": ${GENWIRE_FUZZ_" + draw(st.from_regex(r"[A-Z]{1,5}", fullmatch=True)) + "}"
            )
        if not lines:
            lines = [""]
    data = "\n".join(lines).encode()
    if draw(st.booleans()) and draw(st.booleans()):
        pos = draw(st.integers(0, len(data)))
        data = data[:pos] + draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\x00", b"\xe2\x82"])) + data[pos:]
    return data


def check_fails_cleanly(path: Path) -> str:
    """Boot; it either works or raises ConfigError/WiringError with located problems.
    (No timing here: speed is benchmarks/validate_scaling.py's job, and a wall-clock
    bound per case flakes on a loaded machine.)"""
    try:
        genwire.boot(path)
        outcome = "ok"
    except (genwire.ConfigError, genwire.WiringError) as exc:
        assert exc.problems
        for problem in exc.problems:
            assert LOCATION.match(problem), problem
        outcome = type(exc).__name__
    return outcome


FUZZ_CASES = 300


@settings(max_examples=FUZZ_CASES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mutated())
def test_mutated_configs_fail_cleanly(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "genwire.yaml"
    path.write_bytes(data)
    check_fails_cleanly(path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=mutated())
def test_cli_never_shows_a_traceback(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "genwire.yaml"
    path.write_bytes(data)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code in (0, 2), (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert result.stderr.startswith("error: ")


BOMB = "\n".join(
    ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    + [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    + ["pipeline: {columns: *a9}"]
)


@pytest.mark.parametrize(
    ("name", "text", "expect"),
    ids=["bomb", "deep-lists", "deep-maps", "huge", "many-columns"],
    argvalues=[
        ("bomb", BOMB, "YAML aliases"),
        ("deep", "pipeline: " + "[" * 20000 + "]" * 20000, "nest"),
        ("deep-maps", "pipeline: " + "{a: " * 3000 + "1" + "}" * 3000, "nest"),
        ("huge", "pipeline:\n  columns:\n" + "    - {name: c, generator: sampler}\n" * 400_000, "limit is"),
        (
            "many",
            "pipeline:\n  columns:\n" + "".join(f"    - {{name: c{i}, generator: nope}}\n" for i in range(20_000)),
            "and 19950 more",
        ),
    ],
)
def test_hostile_files_are_bounded(tmp_path: Path, name: str, text: str, expect: str) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    tracemalloc.start()
    started = time.process_time()
    try:
        with pytest.raises((genwire.ConfigError, genwire.WiringError)) as info:
            genwire.boot(path)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    # This process's CPU time, not the wall clock: other processes on a loaded machine
    # stretch the wall clock 5-fold (70 s here with two CPU burners beside the suite) but not
    # the work done. Generous: it guards against an expansion that never ends, not speed.
    assert time.process_time() - started < 60
    assert peak < 512 * 1024 * 1024
    assert expect in str(info.value)
    assert all(LOCATION.match(p) for p in info.value.problems)
