"""The wiring graph (``report.wiring``) as inline SVG for the report page: one column of
boxes per layer (managed servers; datasets, tool servers and providers; models; columns;
gates), edges as curves. Every label is escaped here; nothing is fetched, no script."""

from __future__ import annotations

from html import escape
from typing import Any

from genwire.engine.report.wiring import LAYERS, Node, WiringGraph

BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 190, 40, 70, 14, 10
LOOP_X = 40  # how far right a column-to-column edge loops (its curve stays within the svg)
LABEL_CHARS = 26
FILL = {
    "server": "#f3f0ff",
    "dataset": "#e6fcf5",
    "tools": "#fff4e6",
    "provider": "#f1f3f5",
    "model": "#e7f5ff",
    "column": "#ffffff",
    "gate": "#fff9db",
}


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def wiring_svg(graph: WiringGraph) -> str:
    """The graph as one ``<svg>`` element (empty string for an empty graph)."""
    layers = [layer for layer in (graph.layer(i) for i in range(len(LAYERS))) if layer]
    if not layers:
        return ""
    where: dict[str, tuple[int, int]] = {}
    for x_index, layer in enumerate(layers):
        for y_index, node in enumerate(layer):
            where[node.id] = (PAD + x_index * (BOX_W + GAP_X), PAD + y_index * (BOX_H + GAP_Y))
    # A column feeding a later column loops out on the right of their layer: room for it.
    loops = any(where[a][0] == where[b][0] for a, b in graph.edges)
    width = PAD * 2 + len(layers) * BOX_W + (len(layers) - 1) * GAP_X + (LOOP_X if loops else 0)
    height = PAD * 2 + max(len(layer) for layer in layers) * (BOX_H + GAP_Y) - GAP_Y
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="wiring" data-graph="wiring">'
    ]
    for a, b in graph.edges:
        (x1, y1), (x2, y2) = where[a], where[b]
        if x1 == x2:  # a column feeding a later column of the same layer: around the right side
            sx, sy, ex, ey = x1 + BOX_W, y1 + BOX_H // 2, x2 + BOX_W, y2 + BOX_H // 2
            path = f"M{sx},{sy} C{sx + LOOP_X},{sy} {ex + LOOP_X},{ey} {ex},{ey}"
        else:
            sx, sy, ex, ey = x1 + BOX_W, y1 + BOX_H // 2, x2, y2 + BOX_H // 2
            mid = (sx + ex) // 2
            path = f"M{sx},{sy} C{mid},{sy} {mid},{ey} {ex},{ey}"
        parts.append(f'<path d="{path}" fill="none" stroke="#868e96" stroke-width="1.2"/>')
    for layer in layers:
        parts.extend(_box(node, *where[node.id]) for node in layer)
    parts.append("</svg>")
    return "".join(parts)


def _box(node: Node, x: int, y: int) -> str:
    dash = ' stroke-dasharray="4 3"' if node.kind == "gate" else ""
    detail = f"{node.kind}: {node.detail}" if node.detail else node.kind
    return (
        f'<g data-node="{escape(node.id)}"><title>{escape(node.label)} ({escape(detail)})</title>'
        f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="6" fill="{FILL.get(node.kind, "#fff")}" '
        f'stroke="#adb5bd"{dash}/>'
        f'<text x="{x + 8}" y="{y + 16}" font-size="12" font-weight="600">{escape(_short(node.label))}</text>'
        f'<text x="{x + 8}" y="{y + 31}" font-size="10" fill="#616e7c">{escape(_short(detail))}</text></g>'
    )


def wiring_section(recorded: Any) -> str:
    """The page's "Wiring" section from the graph a session line recorded ("" without one)."""
    graph = WiringGraph.from_dict(recorded)
    svg = wiring_svg(graph) if graph is not None else ""
    if not svg:
        return ""
    return f'<h2>Wiring</h2><div class="panel">{svg}</div>'
