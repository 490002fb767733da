"""The wiring graph (``engine.report.wiring``, the one the report page draws as SVG) as a
Mermaid flowchart for the dataset card: left to right, datasets, tool servers and
providers → models → columns → gates (gates drawn as hexagons)."""

from __future__ import annotations

from genwire.engine.report.wiring import LAYERS, WiringGraph

_SHAPES = {
    "dataset": ('[("', '")]'),
    "tools": ('[/"', '"/]'),
    "provider": ('(["', '"])'),
    "model": ('["', '"]'),
    "column": ('["', '"]'),
    "gate": ('{{"', '"}}'),
}


def _label(text: str) -> str:
    """Text safe inside a quoted Mermaid label (quotes and markup as entity codes)."""
    for raw, code in (("&", "#amp;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;"), ("\n", " ")):
        text = text.replace(raw, code)
    return text


def mermaid(graph: WiringGraph) -> str:
    """A ``flowchart LR`` (without the fence); node ids are n0, n1... so any name is safe."""
    order = [n for i in range(len(LAYERS)) for n in graph.layer(i)]
    ids = {node.id: f"n{i}" for i, node in enumerate(order)}
    lines = ["flowchart LR"]
    for node in order:
        start, end = _SHAPES[node.kind]
        detail = f"<br/>{node.kind}: {_label(node.detail)}" if node.detail else f"<br/>{node.kind}"
        lines.append(f"    {ids[node.id]}{start}{_label(node.label)}{detail}{end}")
    lines.extend(f"    {ids[a]} --> {ids[b]}" for a, b in graph.edges)
    return "\n".join(lines)
