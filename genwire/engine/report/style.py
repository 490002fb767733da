"""How the report page looks: its one inline stylesheet and the style of each way a run
can end (``report.page`` puts them in the page; nothing here is fetched)."""

OUTCOME_STYLE = {
    "completed": "ok",
    "estimate": "info",
    "interrupted": "warn",
    "unfinished": "warn",
    "stopped at the budget": "warn",
    "stopped at max_candidates": "warn",
    "stopped": "bad",
    "failed": "bad",
}

CSS = """
:root{--fg:#1f2933;--muted:#616e7c;--line:#e4e7eb;--bg:#f5f7fa;--card:#fff;--accent:#2563eb}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
color:var(--fg);background:var(--bg)}
main{max-width:1220px;margin:0 auto;padding:24px 24px 48px}
header{display:flex;align-items:baseline;gap:14px;flex-wrap:wrap;margin-bottom:6px}
h1{font-size:22px;margin:0}
h2{font-size:16px;margin:28px 0 10px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:14px;margin:0 0 6px}
.sub{color:var(--muted);margin:0 0 18px;word-break:break-all}
.badge{display:inline-block;padding:2px 10px;border-radius:999px;font-weight:600;font-size:12px;
text-transform:uppercase;letter-spacing:.04em}
.ok{background:#d3f9d8;color:#2b8a3e}.warn{background:#fff3bf;color:#946200}.bad{background:#ffe3e3;color:#c92a2a}
.info{background:#dbe4ff;color:#364fc7}
.message{background:var(--card);border-left:4px solid #f59f00;padding:8px 12px;margin:0 0 16px;
white-space:pre-wrap;word-break:break-word}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 14px}
.card .v{font-size:22px;font-weight:650;font-variant-numeric:tabular-nums}
.card .k{color:var(--muted);font-size:12px}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:14px}
.panel{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 14px;overflow:auto}
.legend{display:flex;gap:14px;flex-wrap:wrap;font-size:12px;color:var(--muted);margin-top:4px}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px;vertical-align:-1px}
table{border-collapse:collapse;width:100%;background:var(--card);font-variant-numeric:tabular-nums}
th,td{text-align:left;padding:6px 9px;border-bottom:1px solid var(--line);vertical-align:top}
th{font-size:12px;color:var(--muted);font-weight:600;background:#fafbfc;white-space:nowrap}
td.n,th.n{text-align:right;white-space:nowrap}
.wrap{border:1px solid var(--line);border-radius:8px;overflow:auto}
.cell{max-width:360px;white-space:pre-wrap;word-break:break-word}
.clip{display:-webkit-box;-webkit-line-clamp:3;-webkit-box-orient:vertical;overflow:hidden}
.small{font-size:11px}
.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.muted{color:var(--muted)}
details{background:var(--card);border:1px solid var(--line);border-radius:8px;margin-bottom:8px}
summary{cursor:pointer;padding:8px 12px;font-weight:600}
details .wrap{border:0;border-top:1px solid var(--line);border-radius:0}
svg.chart{width:100%;height:auto;display:block}
svg .grid{stroke:#eef0f3;stroke-width:1}
svg .axis{stroke:#9aa5b1;stroke-width:1}
svg .session{stroke:#9aa5b1;stroke-dasharray:4 3}
svg .line{fill:none;stroke-width:1.6;stroke-linejoin:round}
svg .hbar{fill:#4c6ef5}
svg .mark{stroke:#c92a2a;stroke-dasharray:3 3}
svg text{font:11px system-ui,sans-serif;fill:#616e7c}
svg .ylab{text-anchor:end}svg .xlab{text-anchor:middle}svg .mlab{fill:#c92a2a;font-weight:600}
footer{margin-top:32px;color:var(--muted);font-size:12px}
"""
