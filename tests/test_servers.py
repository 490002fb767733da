"""Managed inference servers (SPEC §23), for real: the stand-in server
(``genwire.testing.managed_server``) started by the genwire command, checked, restarted
and stopped; every process of its group looked for by PID afterwards, its port checked free."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from servers_support import (
    WAIT_S,
    genwire,
    marker,
    one_server_config,
    pipeline,
    port_free,
    ports_in,
    processes_of,
    server_block,
    starts_in,
    wait_gone,
)

from genwire.testing.managed_server import command


def test_a_loading_server_is_waited_for_and_leaves_nothing(tmp_path: Path) -> None:
    model = marker()
    (tmp_path / "genwire.yaml").write_text(one_server_config(model, "--load-s", "2", "--child"))
    log = tmp_path / "out/data.jsonl.servers/stand_in.log"
    checked = genwire("preflight", "--json", "genwire.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    server = next(c for c in report["checks"] if c["kind"] == "server")
    assert server["target"] == "stand_in" and server["status"] == "ok" and server["latency_s"] >= 2
    assert wait_gone(model, timeout=1.0) == []  # the server and its child: gone when the command returned
    assert all(port_free(port) for port in ports_in(log))
    ran = genwire("run", "--json", "genwire.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["rows_written"] == 4
    assert len((tmp_path / "out/data.jsonl").read_text().splitlines()) == 4
    assert wait_gone(model, timeout=1.0) == []
    assert all(port_free(port) for port in ports_in(log))


def test_the_stand_in_command_for_a_config() -> None:
    assert command("m", load_s=2, crash_after=10, child=True) == [
        *("python", "-m", "genwire.testing.managed_server", "--port", "{port}", "--model", "m"),
        *("--load-s", "2", "--crash-after", "10", "--child"),
    ]


def test_a_server_no_wired_model_reaches_is_never_started(tmp_path: Path) -> None:
    used, unused = marker(), marker()
    (tmp_path / "genwire.yaml").write_text(
        "servers:\n"
        + server_block("used", used)
        + server_block("unused", unused)
        + "providers:\n  p: {kind: openai, server: used}\n  q: {kind: openai, server: unused}\n"
        + f"models:\n  m: {{provider: p, model: {used}, kind: chat}}\n"
        + f"  n: {{provider: q, model: {unused}, kind: chat}}\n"
        + pipeline()
    )
    ran = genwire("run", "genwire.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    servers = tmp_path / "out/data.jsonl.servers"
    assert (servers / "used.log").exists() and not (servers / "unused.log").exists()  # no process launched


def test_health_503_while_models_answers_is_waited_for(tmp_path: Path) -> None:
    model = marker()
    config = one_server_config(model, "--unhealthy-s", "3", provider=", retries: 0")
    (tmp_path / "genwire.yaml").write_text(config)
    checked = genwire("preflight", "--json", "genwire.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    checks = {c["target"]: c for c in json.loads(checked.stdout)["checks"]}
    assert checks["stand_in"]["latency_s"] >= 3 and checks["m"]["status"] == "ok"


def test_a_failed_start_is_reported_at_once_with_its_log_and_no_secret(tmp_path: Path) -> None:
    model = marker()
    secret = "s3cr3t-value-of-the-token"
    config = one_server_config(model, "--fail-start", env={"SERVER_TOKEN": "${SERVER_TOKEN}"})
    (tmp_path / "genwire.yaml").write_text(config)
    # startup_timeout_s is 600: a failure found only at the timeout would not return within WAIT_S.
    checked = genwire("preflight", "--json", "genwire.yaml", cwd=tmp_path, env={"SERVER_TOKEN": secret}, timeout=WAIT_S)
    assert checked.returncode == 1
    assert secret not in checked.stdout + checked.stderr
    # Read from --json: the table wraps a long message at a width that depends on the path.
    server, *models = json.loads(checked.stdout)["checks"]
    assert server["error_class"] == "start_failed", server
    assert "exited with code 3" in server["message"] and "out of memory" in server["message"]
    assert "SERVER_TOKEN=***" in server["message"]
    log = (tmp_path / "out/data.jsonl.servers/stand_in.log").read_text()
    assert "env SERVER_TOKEN=***" in log and secret not in log  # the log on disk holds no secret either
    # the model: skipped, not a second failure
    assert any("not probed: server 'stand_in' did not start" in m["message"] for m in models), models
    assert wait_gone(model) == []


def test_a_server_never_ready_is_a_timeout_then_stopped(tmp_path: Path) -> None:
    model = marker()
    config = one_server_config(model, "--unhealthy-s", "10000", "--child", startup_timeout_s=3, stop_timeout_s=2)
    (tmp_path / "genwire.yaml").write_text(config)
    checked = genwire("preflight", "--json", "genwire.yaml", cwd=tmp_path)
    assert checked.returncode == 1
    server = json.loads(checked.stdout)["checks"][0]
    assert server["error_class"] == "timeout" and "startup_timeout_s 3" in server["message"]
    assert wait_gone(model, timeout=1.0) == []


def test_a_server_that_ignores_sigterm_is_killed_after_stop_timeout_s(tmp_path: Path) -> None:
    model = marker()
    (tmp_path / "genwire.yaml").write_text(one_server_config(model, "--ignore-term", "--child", stop_timeout_s=2))
    checked = genwire("preflight", "genwire.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert wait_gone(model, timeout=1.0) == []  # SIGKILL of the whole group once stop_timeout_s passed
    assert all(port_free(p) for p in ports_in(tmp_path / "out/data.jsonl.servers/stand_in.log"))


def test_a_server_that_does_not_serve_the_model_is_not_found_and_stopped(tmp_path: Path) -> None:
    model = marker()
    config = one_server_config(model, "--child")  # the server serves `model`; the config asks for other-name
    config = config.replace(f"\n    model: {model}\n", "\n    model: other-name\n")
    (tmp_path / "genwire.yaml").write_text(config.replace(f"model: {model}, kind", "model: other-name, kind"))
    checked = genwire("preflight", "--json", "genwire.yaml", cwd=tmp_path)
    assert checked.returncode == 1
    server = json.loads(checked.stdout)["checks"][0]
    assert server["error_class"] == "not_found" and f"it lists: {model}" in server["message"]
    assert wait_gone(model, timeout=1.0) == []  # a failed pre-flight stops the server


def test_a_port_in_use_is_named(tmp_path: Path) -> None:
    model = marker()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (tmp_path / "genwire.yaml").write_text(one_server_config(model, port=port))
        checked = genwire("preflight", "--json", "genwire.yaml", cwd=tmp_path)
    assert checked.returncode == 1
    server = json.loads(checked.stdout)["checks"][0]
    assert server["error_class"] == "port_in_use" and f"port {port}" in server["message"]
    assert processes_of(model) == []


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT], ids=["kill -9", "Ctrl-C"])
def test_kill_9_or_ctrl_c_of_genwire_mid_run_takes_the_server_group_with_it(
    tmp_path: Path, signum: signal.Signals
) -> None:
    model = marker()
    config = one_server_config(model, "--latency", "0.5", "--child").replace("num_records: 4", "num_records: 400")
    (tmp_path / "genwire.yaml").write_text(config)
    run = subprocess.Popen(
        [sys.executable, "-m", "genwire.cli.main", "run", "genwire.yaml"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        checkpoint = tmp_path / "out/data.jsonl.checkpoint"
        deadline = time.monotonic() + WAIT_S
        while not any(checkpoint.glob("rows-*")) and time.monotonic() < deadline:  # generating
            time.sleep(0.1)
        assert any(checkpoint.glob("rows-*")), "the run never started generating"
        assert len(processes_of(model)) >= 2  # the server and its child, running
        run.send_signal(signum)
        assert run.wait(timeout=WAIT_S) == (-signal.SIGKILL if signum == signal.SIGKILL else 130)
        assert wait_gone(model, timeout=30.0) == []
        assert all(port_free(p) for p in ports_in(tmp_path / "out/data.jsonl.servers/stand_in.log"))
    finally:
        run.kill()
        run.wait()


def _crashing(tmp_path: Path, restarts: int) -> tuple[str, subprocess.CompletedProcess[str]]:
    model = marker()
    config = one_server_config(model, "--crash-after", "10", restarts=restarts)
    config = config.replace("num_records: 4", "num_records: 24").replace(
        "server: stand_in", "server: stand_in, max_concurrency: 4"
    )
    (tmp_path / "genwire.yaml").write_text(config)
    return model, genwire("run", "--json", "--no-response-cache", "genwire.yaml", cwd=tmp_path)


def test_a_server_crashing_every_10_answers_is_restarted_and_the_run_finishes(tmp_path: Path) -> None:
    model, ran = _crashing(tmp_path, restarts=5)
    assert ran.returncode == 0, ran.stderr
    summary = json.loads(ran.stdout)
    assert summary["rows_written"] == 24 and summary["rows_failed"] == 0
    assert summary["servers"]["stand_in"]["restarts"] >= 2  # 24 rows and a probe: at least 3 lives
    assert starts_in(tmp_path / "out/data.jsonl.servers/stand_in.log") == 1 + summary["servers"]["stand_in"]["restarts"]
    page = (tmp_path / "out/data.jsonl.report.html").read_text()  # the report page links the log, says it restarted
    assert 'href="data.jsonl.servers/stand_in.log"' in page and "Restarted " in page
    assert wait_gone(model, timeout=1.0) == []


def test_with_no_restarts_the_first_crash_stops_the_run_rows_kept(tmp_path: Path) -> None:
    model, ran = _crashing(tmp_path, restarts=0)
    assert ran.returncode == 1
    summary = json.loads(ran.stdout)
    log = tmp_path / "out/data.jsonl.servers/stand_in.log"
    assert "server 'stand_in' died mid-run" in summary["error"] and str(log) in summary["error"]
    assert summary["rows_kept"] >= 1
    rows = sum(len(p.read_text().splitlines()) for p in (tmp_path / "out/data.jsonl.checkpoint").glob("rows-*"))
    assert rows == summary["rows_kept"]
    assert wait_gone(model, timeout=1.0) == []


def test_replicas_are_an_endpoint_pool_and_both_serve(tmp_path: Path) -> None:
    model = marker()
    config = one_server_config(model, "--latency", "0.05", replicas=2).replace("num_records: 4", "num_records: 16")
    (tmp_path / "genwire.yaml").write_text(config)
    ran = genwire("run", "--json", "genwire.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    endpoints = json.loads(ran.stdout)["models"]["m"]["endpoints"]
    assert set(endpoints) == {"p-1", "p-2"} and all(e["requests"] > 0 for e in endpoints.values())
    logs = tmp_path / "out/data.jsonl.servers"
    assert {p.name for p in logs.iterdir()} == {"stand_in-1.log", "stand_in-2.log"}
    assert wait_gone(model, timeout=1.0) == []


def test_serve_holds_one_server_for_two_runs_and_ctrl_c_stops_it(tmp_path: Path) -> None:
    model = marker()
    (tmp_path / "genwire.yaml").write_text(one_server_config(model, "--load-s", "1", "--child"))
    serve = subprocess.Popen(
        [sys.executable, "-m", "genwire.cli.main", "serve", "genwire.yaml"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert serve.stdout is not None
        lines = [serve.stdout.readline() for _ in range(2)]
        assert lines[1].startswith("serving stand_in at http://127.0.0.1:"), lines
        log = tmp_path / "out/data.jsonl.servers/stand_in.log"
        for prompt in ("first", "second"):  # an edited prompt: the same server spec
            config = (tmp_path / "genwire.yaml").read_text().replace("says hi", f"says {prompt}")
            (tmp_path / "genwire.yaml").write_text(config)
            ran = genwire("run", "--json", "genwire.yaml", cwd=tmp_path)
            assert ran.returncode == 0, ran.stderr
            assert json.loads(ran.stdout)["rows_written"] == 4
        assert starts_in(log) == 1  # one server start in all
        assert len(processes_of(model)) >= 2  # still held after the runs
        serve.send_signal(signal.SIGINT)
        assert serve.wait(timeout=WAIT_S) == 0
        assert wait_gone(model, timeout=1.0) == []
        assert all(port_free(p) for p in ports_in(log))
    finally:
        serve.kill()
        serve.wait()
        if serve.stdout is not None:
            serve.stdout.close()
