"""Managed servers in the one wiring graph (SPEC §23 + §24): ``genwire plan --format
mermaid``, the dataset card's Mermaid and the report page's SVG draw the same graph,
server → provider → model → columns; the card says each server's restarts and shows no
path or URL that is only true on this machine."""

from __future__ import annotations

import json
from pathlib import Path

from servers_support import genwire, marker, one_server_config, server_block, wait_gone

from genwire.engine.report.wiring import Node, WiringGraph
from genwire.engine.report.wiring_mermaid import mermaid


def _mermaid_of(card: str) -> str:
    return card.split("```mermaid\n", 1)[1].split("\n```", 1)[0]


def test_a_run_on_a_managed_server_names_it_in_the_card_and_the_page(tmp_path: Path) -> None:
    model = marker()
    # The stand-in dies after its 3rd answer: 4 rows and a probe need at least one restart.
    config = one_server_config(model, "--crash-after", "3", restarts=5)
    config = config.replace("server: stand_in", "server: stand_in, max_concurrency: 1")
    (tmp_path / "genwire.yaml").write_text(config)
    ran = genwire("run", "--json", "--no-response-cache", "genwire.yaml", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    restarts = json.loads(ran.stdout)["servers"]["stand_in"]["restarts"]
    assert restarts >= 1
    carded = genwire("card", "out/data.jsonl", cwd=tmp_path)
    assert carded.returncode == 0, carded.stderr
    card = carded.stdout
    graph = _mermaid_of(card)
    assert f's_stand_in[["stand_in<br/>server: command, {model}"]]' in graph
    assert "s_stand_in --> p_p" in graph and "p_p --> r_m" in graph and "r_m -->|model| c_a" in graph
    servers = card.split("## Servers", 1)[1].split("\n## ", 1)[0]
    assert f"| stand_in | command, {model} | {restarts} |" in servers
    # Nothing local in a card meant to be shared: no log path, no directory, no local URL.
    assert ".servers/" not in card and str(tmp_path) not in card and "127.0.0.1" not in card
    assert "stand_in.log" not in card
    # genwire plan draws the same graph with the same renderer.
    planned = genwire("plan", "--format", "mermaid", "genwire.yaml", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.strip() == graph.strip()
    page = (tmp_path / "out/data.jsonl.report.html").read_text()
    assert 'data-node="server:stand_in"' in page
    assert wait_gone(model, timeout=30.0) == []


def test_plan_mermaid_shows_a_server_no_model_reaches_as_never_started(tmp_path: Path) -> None:
    used, unused = marker(), marker()
    config = one_server_config(used).replace(
        "providers:", "" + server_block("spare", unused, replicas=2) + "providers:", 1
    )
    (tmp_path / "genwire.yaml").write_text(config)
    planned = genwire("plan", "--format", "mermaid", "genwire.yaml", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    out = planned.stdout
    assert out.startswith("flowchart LR")
    assert f'"spare<br/>server: command, {unused}, 2 replicas, not started (no wired model reaches it)"' in out
    assert "s_spare -->" not in out and "s_stand_in --> p_p" in out


def test_a_graph_recorded_before_slots_and_servers_still_loads() -> None:
    old = {
        "nodes": [
            {"id": "model:m", "kind": "model", "label": "m", "detail": "x"},
            {"id": "column:a", "kind": "column", "label": "a", "detail": "llm-text"},
        ],
        "edges": [["model:m", "column:a"]],
    }
    graph = WiringGraph.from_dict(old)
    assert graph is not None and graph.edges == [("model:m", "column:a")] and graph.slots == {}
    assert "r_m --> c_a" in mermaid(graph)
    graph.link("model:m", "column:a", "model")
    again = WiringGraph.from_dict(json.loads(json.dumps(graph.as_dict())))
    assert again is not None and again.slots == {("model:m", "column:a"): "model"}


def test_mermaid_ids_of_names_that_clash_stay_apart() -> None:
    graph = WiringGraph(
        [Node("column:a-b", "column", "a-b"), Node("column:a_b", "column", "a_b"), Node("gate:g", "gate", "g")],
        [("column:a-b", "column:a_b"), ("column:a_b", "gate:g")],
    )
    text = mermaid(graph)
    assert "c_a_b -.-> c_a_b_2" in text and "c_a_b_2 -.-> c_g" in text


def test_plan_mermaid_draws_a_replicated_server_before_each_of_its_pool_providers(tmp_path: Path) -> None:
    model = marker()
    (tmp_path / "genwire.yaml").write_text(one_server_config(model, replicas=2))
    planned = genwire("plan", "--format", "mermaid", "genwire.yaml", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert f'"stand_in<br/>server: command, {model}, 2 replicas"' in planned.stdout
    for provider in ("p_p_1", "p_p_2"):
        assert f"s_stand_in --> {provider}" in planned.stdout and f"{provider} --> r_m" in planned.stdout
