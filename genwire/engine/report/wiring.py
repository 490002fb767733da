"""The wiring of a run as one graph model (SPEC §24): managed servers → providers,
datasets and tool servers → models → columns → gates. It is built from the container's
wiring plan (``WiringPlan``, what ``genwire plan`` shows), so ``plan --format mermaid``,
the dataset card and the report page draw one graph: the run records it in its metrics'
session line (``as_dict``); ``wiring_svg`` draws it for the page, ``wiring_mermaid`` for
the card and ``genwire plan``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from genwire.container.plan import ServerPlan, TargetPlan, WiringPlan

# Layers, left to right; a node's kind says its layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("server",),
    ("dataset", "tools", "provider"),
    ("model",),
    ("column",),
    ("gate",),
)
KINDS = frozenset(kind for layer in LAYERS for kind in layer)
ROW_KINDS = frozenset({"column", "gate"})  # an edge between two of these is a read of a cell


@dataclass(frozen=True)
class Node:
    id: str  # "<kind>:<name>": unique across kinds (a model and a column may share a name)
    kind: str  # server | dataset | tools | provider | model | column | gate
    label: str  # the name as written
    detail: str = ""  # the provider kind, the model id, the generator, the server's kind and model


@dataclass
class WiringGraph:
    nodes: list[Node] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)  # (from id, to id)
    slots: dict[tuple[str, str], str] = field(default_factory=dict)  # edge -> the column's slot it binds

    def add(self, kind: str, name: str, detail: str = "") -> str:
        node_id = _node_id(kind, name)
        if all(n.id != node_id for n in self.nodes):
            self.nodes.append(Node(node_id, kind, name, detail))
        return node_id

    def link(self, a: str, b: str, slot: str = "") -> None:
        if (a, b) not in self.edges:
            self.edges.append((a, b))
        if slot:
            known = self.slots.get((a, b))
            self.slots[(a, b)] = f"{known}, {slot}" if known and slot not in known.split(", ") else slot

    def has(self, node_id: str) -> bool:
        return any(n.id == node_id for n in self.nodes)

    def as_dict(self) -> dict[str, Any]:
        edges = [[a, b, self.slots[(a, b)]] if (a, b) in self.slots else [a, b] for a, b in self.edges]
        return {"nodes": [vars(n) for n in self.nodes], "edges": edges}

    @classmethod
    def from_dict(cls, value: Any) -> WiringGraph | None:
        """The graph a session line holds (an edge [from, to] or [from, to, slot]); None
        for anything of another shape."""
        if not isinstance(value, dict):
            return None
        try:
            nodes = [
                Node(str(n["id"]), str(n["kind"]), str(n["label"]), str(n.get("detail", "")))
                for n in value["nodes"]
                if n["kind"] in KINDS
            ]
            ids = {n.id for n in nodes}
            graph = cls(nodes)
            for edge in value["edges"]:
                a, b, *slot = (str(part) for part in edge)
                if a in ids and b in ids and len(slot) <= 1:
                    graph.link(a, b, slot[0] if slot else "")
        except (KeyError, TypeError, ValueError):
            return None
        return graph

    def layer(self, index: int) -> list[Node]:
        return [n for n in self.nodes if n.kind in LAYERS[index]]


def _node_id(kind: str, name: str) -> str:
    return f"{kind}:{name}"


def wiring_graph(plan: WiringPlan) -> WiringGraph:
    """The graph of what is wired: the resources some column binds (with the providers
    serving those models and the managed servers behind them); a column's reads of
    earlier columns are edges too."""
    graph = WiringGraph()
    targets = {t.name: t for t in plan.targets}
    for column in plan.columns:
        node = graph.add("gate" if column.gate else "column", column.name, column.generator)
        for slot in column.slots:
            for resource in slot.resources:
                graph.link(_resource(graph, resource, targets.get(resource)), node, slot.slot)
    row_nodes = {n.label: n.id for n in graph.nodes if n.kind in ROW_KINDS}
    for column in plan.columns:
        for read in column.reads:
            source = row_nodes.get(read.split(".", 1)[0])
            if source is not None and source != row_nodes[column.name]:
                graph.link(source, row_nodes[column.name])
    for server in plan.servers:
        _server(graph, server)
    return graph


def _resource(graph: WiringGraph, name: str, target: TargetPlan | None) -> str:
    """The node of a bound resource (a model with its providers, a dataset, a tool server)."""
    if target is None or target.kind.value == "tools":
        return graph.add("tools", name, "")
    if target.kind.value == "dataset":
        return graph.add("dataset", name, target.path or "")
    # The model id, and its kind where it is not a chat model (an embedder, a registry).
    kind = "" if target.kind.value == "chat_model" else f", {target.kind.value}"
    node = graph.add("model", name, (target.model or "") + kind)
    for provider, provider_kind in target.provider_kinds.items():
        graph.link(graph.add("provider", provider, provider_kind), node)
    return node


def _server(graph: WiringGraph, server: ServerPlan) -> None:
    """A managed server (SPEC §23) and the providers it serves; one no wired model
    reaches is drawn too, said never to start."""
    detail = f"{server.kind}, {server.model}"
    if server.replicas > 1:
        detail += f", {server.replicas} replicas"
    if not server.started:
        detail += ", not started (no wired model reaches it)"
    node = graph.add("server", server.name, detail)
    for provider in server.providers:
        if graph.has(_node_id("provider", provider)):
            graph.link(node, _node_id("provider", provider))
