"""The wiring of a run as one graph model (SPEC §24): datasets, tool servers and
providers → models → columns → gates. The run records it in its metrics' session line
(``as_dict``); the report page draws it as inline SVG (``report.wiring_svg``) and the
dataset card as Mermaid (``handoff.mermaid``) — one model, two renderings."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from genwire.config.schema import GenwireConfig
    from genwire.container.wiring import ColumnWiring

# Layers, left to right; a node's kind says its layer.
LAYERS: tuple[tuple[str, ...], ...] = (("dataset", "tools", "provider"), ("model",), ("column",), ("gate",))
KINDS = frozenset(kind for layer in LAYERS for kind in layer)


@dataclass(frozen=True)
class Node:
    id: str  # "<kind>:<name>": unique across kinds (a model and a column may share a name)
    kind: str  # dataset | tools | provider | model | column | gate
    label: str  # the name as written
    detail: str = ""  # the provider kind, the model id, the generator


@dataclass
class WiringGraph:
    nodes: list[Node] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)  # (from id, to id)

    def as_dict(self) -> dict[str, Any]:
        return {"nodes": [vars(n) for n in self.nodes], "edges": [list(e) for e in self.edges]}

    @classmethod
    def from_dict(cls, value: Any) -> WiringGraph | None:
        """The graph a session line holds; None for anything of another shape."""
        if not isinstance(value, dict):
            return None
        try:
            nodes = [
                Node(str(n["id"]), str(n["kind"]), str(n["label"]), str(n.get("detail", "")))
                for n in value["nodes"]
                if n["kind"] in KINDS
            ]
            ids = {n.id for n in nodes}
            edges = [(str(a), str(b)) for a, b in value["edges"] if a in ids and b in ids]
        except (KeyError, TypeError, ValueError):
            return None
        return cls(nodes, edges)

    def layer(self, index: int) -> list[Node]:
        return [n for n in self.nodes if n.kind in LAYERS[index]]


def _node_id(kind: str, name: str) -> str:
    return f"{kind}:{name}"


def wiring_graph(config: GenwireConfig, columns: Iterable[ColumnWiring]) -> WiringGraph:
    """The graph of what is wired: only resources some column binds (and the providers
    serving those models); a column's reads of earlier columns are edges too."""
    graph = WiringGraph()
    seen: set[str] = set()

    def add(kind: str, name: str, detail: str = "") -> str:
        node_id = _node_id(kind, name)
        if node_id not in seen:
            seen.add(node_id)
            graph.nodes.append(Node(node_id, kind, name, detail))
        return node_id

    def link(a: str, b: str) -> None:
        if (a, b) not in graph.edges:
            graph.edges.append((a, b))

    wired = list(columns)
    names = {c.name for c in wired}
    for column in wired:
        kind = "gate" if column.generator_cls.metadata.gate else "column"
        target = add(kind, column.name, column.generator_name)
        for slot in column.slots.values():
            for resource in slot.resources:
                link(_resource(config, resource, add, link), target)
        for read in sorted(column.reads):
            source = read.split(".", 1)[0]
            if source in names and source != column.name:
                source_kind = "gate" if _node_id("gate", source) in seen else "column"
                link(_node_id(source_kind, source), target)
    return graph


def _resource(config: GenwireConfig, name: str, add: Any, link: Any) -> str:
    """The node of a bound resource (a model with its providers, a dataset, a tool server)."""
    if name in config.models:
        model = config.models[name]
        node = add("model", name, model.model)
        for provider in model.providers:
            kind = getattr(config.providers.get(provider), "kind", "")
            link(add("provider", provider, str(kind)), node)
        return str(node)
    if name in config.datasets:
        return str(add("dataset", name, config.datasets[name].path))
    return str(add("tools", name, ""))
