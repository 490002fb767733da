"""The wiring graph (``engine.report.wiring``, the one the report page draws as SVG) as a
Mermaid flowchart, for the dataset card and ``genwire plan --format mermaid``: left to
right, managed servers → providers, datasets and tool servers → models → columns → gates
(gates drawn as hexagons); a binding's edge names the column's slot, a read of an earlier
column is dotted."""

from __future__ import annotations

from genwire.engine.report.wiring import LAYERS, ROW_KINDS, Node, WiringGraph

_SHAPES = {
    "server": ('[["', '"]]'),
    "dataset": ('[("', '")]'),
    "tools": ('[/"', '"/]'),
    "provider": ('(["', '"])'),
    "model": ('["', '"]'),
    "column": ('["', '"]'),
    "gate": ('{{"', '"}}'),
}
# Node ids say the node's role: r_ a resource a slot binds, c_ a column, s_ a server, p_ a provider.
_PREFIX = {"server": "s", "provider": "p", "dataset": "r", "tools": "r", "model": "r", "column": "c", "gate": "c"}


def _label(text: str) -> str:
    """Text safe inside a quoted Mermaid label (quotes and markup as entity codes)."""
    for raw, code in (("&", "#amp;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;"), ("|", "#124;"), ("\n", " ")):
        text = text.replace(raw, code)
    return text


def _ids(nodes: list[Node]) -> dict[str, str]:
    """Readable ids (``r_writer``, ``c_question``): the name with anything but letters and
    digits as ``_``; a second name that maps to a taken id gets a number."""
    ids: dict[str, str] = {}
    taken: set[str] = set()
    for node in nodes:
        base = _PREFIX[node.kind] + "_" + "".join(ch if ch.isascii() and ch.isalnum() else "_" for ch in node.label)
        mermaid_id, n = base, 1
        while mermaid_id in taken:
            n += 1
            mermaid_id = f"{base}_{n}"
        taken.add(mermaid_id)
        ids[node.id] = mermaid_id
    return ids


def mermaid(graph: WiringGraph) -> str:
    """A ``flowchart LR`` (without the fence)."""
    order = [n for i in range(len(LAYERS)) for n in graph.layer(i)]
    ids = _ids(order)
    kinds = {n.id: n.kind for n in order}
    lines = ["flowchart LR"]
    for node in order:
        start, end = _SHAPES[node.kind]
        detail = f"<br/>{node.kind}: {_label(node.detail)}" if node.detail else f"<br/>{node.kind}"
        lines.append(f"    {ids[node.id]}{start}{_label(node.label)}{detail}{end}")
    for a, b in graph.edges:
        slot = graph.slots.get((a, b))
        arrow = "-.->" if kinds[a] in ROW_KINDS and kinds[b] in ROW_KINDS else "-->"
        lines.append(f"    {ids[a]} {arrow}{f'|{_label(slot)}|' if slot else ''} {ids[b]}")
    return "\n".join(lines)
