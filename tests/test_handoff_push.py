"""``genwire push`` (SPEC §24) against a local stand-in of the Hugging Face Hub's API
(``genwire.testing.fake_hub``, reached through ``HF_ENDPOINT``). Each push runs as its own
process: ``huggingface_hub`` reads ``HF_ENDPOINT`` and ``HF_TOKEN`` when it is imported."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from handoff_support import CANARY, GatedRun, run_good_rows

from genwire.testing.fake_hub import FakeHub
from genwire.testing.fake_server import FakeOpenAIServer

TOKEN = "hf_canaryTOKEN0123456789abcdef"


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatedRun]:
    with FakeOpenAIServer() as server:
        yield run_good_rows(tmp_path_factory.mktemp("push"), server)


def push(
    output: Path, repo: str, endpoint: str, *extra: str, token: str = TOKEN, home: Path
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "HF_TOKEN": token,
        "HF_HOME": str(home),  # no login of the machine's, no cache shared with other tests
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "NVIDIA_API_KEY": CANARY,
    }
    return subprocess.run(
        [sys.executable, "-m", "genwire.cli.main", "push", str(output), repo, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard, not a speed assert
    )


def shown(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


def test_a_push_uploads_the_export_in_one_commit_and_a_second_changes_nothing(gated: GatedRun, tmp_path: Path) -> None:
    with FakeHub(TOKEN) as hub:
        first = push(gated.output, "me/good-rows", hub.url, "--with-rejected", "--private", home=tmp_path)
        assert first.returncode == 0, shown(first)
        repo = hub.repos["me/good-rows"]
        assert repo.private and len(repo.commits) == 1
        assert sorted(repo.files) == [
            "README.md",
            "data/train-00000-of-00001.parquet",
            "rejected/train-00000-of-00001.parquet",
        ]
        assert repo.files["README.md"].decode().startswith("---\npretty_name: good\n")
        second = push(gated.output, "me/good-rows", hub.url, "--with-rejected", home=tmp_path)
        assert second.returncode == 0, shown(second)
        assert "nothing changed" in second.stdout
        assert len(repo.commits) == 1  # no second commit
        commits = [path for method, path in hub.requests if path.endswith("/commit/main")]
        assert len(commits) == 1
        # Without --with-rejected the next push drops the rejected shard and the config.
        third = push(gated.output, "me/good-rows", hub.url, home=tmp_path)
        assert third.returncode == 0, shown(third)
        assert sorted(repo.files) == ["README.md", "data/train-00000-of-00001.parquet"]
        for done in (first, second, third):
            assert TOKEN not in shown(done) and CANARY not in shown(done) and "Traceback" not in shown(done)
        assert all(TOKEN.encode() not in content and CANARY.encode() not in content for content in repo.files.values())


@pytest.mark.parametrize(("token", "forbid", "said"), [("hf_wrongTOKEN98765", False, "401"), (TOKEN, True, "403")])
def test_a_refused_push_is_one_message_exit_1(
    gated: GatedRun, tmp_path: Path, token: str, forbid: bool, said: str
) -> None:
    with FakeHub(TOKEN) as hub:
        if forbid:
            hub.forbid("me/theirs")
        done = push(gated.output, "me/theirs", hub.url, token=token, home=tmp_path)
    assert done.returncode == 1, shown(done)
    assert said in done.stderr and "Traceback" not in shown(done) and token not in shown(done)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_an_unreachable_hub_is_exit_1_without_the_token(gated: GatedRun, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = push(gated.output, "me/good-rows", f"http://127.0.0.1:{port}", home=tmp_path)
    assert done.returncode == 1, shown(done)
    assert "cannot reach the Hub" in done.stderr and "Traceback" not in shown(done) and TOKEN not in shown(done)


def test_push_without_the_extra_names_the_install(gated: GatedRun, tmp_path: Path) -> None:
    # huggingface_hub made unimportable, as on an install without genwire[hub].
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "huggingface_hub.py").write_text("raise ImportError('not installed')\n")
    env = {**os.environ, "PYTHONPATH": f"{blocker}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-m", "genwire.cli.main", "push", str(gated.output), "me/x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, shown(done)
    assert "pip install 'genwire[hub]'" in done.stderr and "Traceback" not in shown(done)
