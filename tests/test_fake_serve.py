"""``python -m genwire.testing.serve``: the fake server as a command (a port, a whole
``--help``, realistic usage, advertised limits), and docs/cost.md's example run as written
against it."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from support import cli

REPO = Path(__file__).parent.parent
SERVE = [sys.executable, "-m", "genwire.testing.serve"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextlib.contextmanager
def serving(args: list[str]) -> Iterator[str]:
    """The server started with ``args``; yields the URL it printed, stops it by SIGTERM."""
    proc = subprocess.Popen([*SERVE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url, proc.communicate(timeout=30)
        yield url
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0  # SIGTERM is a normal ending
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def chat(url: str, prompt: str) -> tuple[dict[str, str], dict[str, object]]:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": prompt}]}).encode()
    request = urllib.request.Request(url + "/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return dict(answer.headers), json.loads(answer.read())


def test_help_is_whole_and_names_every_option() -> None:
    shown = subprocess.run([*SERVE, "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "high request rates." in shown  # the description is not cut after its first line
    options = ("--port", "--host", "--latency", "--fail-rate", "--realistic-usage", "--advertise-requests")
    for option in options:
        assert option in shown, option
    assert "python -m genwire.testing.serve --port" in shown  # an example


def test_it_listens_on_the_port_asked_with_realistic_usage_and_advertised_limits() -> None:
    port = free_port()
    args = ["--port", str(port), "--realistic-usage", "--advertise-requests", "6000", "--advertise-tokens", "90000"]
    with serving(args) as url:
        assert url == f"http://127.0.0.1:{port}/v1"
        prompt = "lorem ipsum dolor sit amet " * 40  # 1,080 characters, 200 words
        headers, answer = chat(url, prompt)
    assert headers["x-ratelimit-limit-requests"] == "6000"
    assert headers["x-ratelimit-limit-tokens"] == "90000"
    usage = answer["usage"]
    assert isinstance(usage, dict)
    assert 1080 / 4 * 0.9 <= usage["prompt_tokens"] <= 1080 / 4 * 1.1 + 4  # about characters / 4, not words


def test_a_share_of_requests_fails_as_asked() -> None:
    status = 200
    with serving(["--fail-rate", "1", "--fail-status", "502"]) as url:
        try:
            chat(url, "hello")
        except urllib.error.HTTPError as refused:
            status = refused.code
            refused.close()
    assert status == 502


def test_a_taken_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([*SERVE, "--port", str(port)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "Traceback" not in proc.stderr


def _block_after(page: str, marker: str, language: str) -> str:
    """The first ``language`` code block after the line holding ``marker``."""
    found = re.search(re.escape(marker) + r".*?```" + language + r"\n(.*?)```", page, re.S)
    assert found, f"docs/cost.md: no {language} block after {marker!r}"
    return found[1]


def test_the_cost_pages_example_runs_as_written(tmp_path: Path) -> None:
    page = (REPO / "docs" / "cost.md").read_text(encoding="utf-8")
    command = _block_after(page, "To run it\nyourself", "bash").strip()
    config = _block_after(page, "save this as `genwire.yaml`", "yaml")
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "genwire.testing.serve"], command
    # As written, but on a free port (tests run side by side): the page's port, everywhere.
    written_port = words[words.index("--port") + 1]
    port = str(free_port())
    args = [port if w == written_port else w for w in words[3:]]
    assert f"127.0.0.1:{written_port}/v1" in config
    (tmp_path / "genwire.yaml").write_text(config.replace(f":{written_port}/", f":{port}/"), encoding="utf-8")
    with serving(args):
        proc = cli("estimate", "genwire.yaml", "-k", "20", "--json", cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    estimate = json.loads(proc.stdout)
    assert estimate["rows_done"] == 20 and estimate["rows_left"] == 1980
    writer, embedder = estimate["models"]["writer"], estimate["models"]["embedder"]
    assert writer["requests_per_row"] == 2.0 and embedder["input_tokens_mean"] > 0
    # Realistic answers (about 120 tokens, at most max_tokens 200), not a few words each.
    assert 50 < writer["output_tokens_mean"] <= 200
    assert estimate["cost_usd"] > 0
