"""The dashboard's charts, drawn with Plotly: interactive in any browser, and its JavaScript ships inside the pip
package (``plotly.offline.get_plotlyjs``), so the site needs no CDN and works from ``file://``."""

from __future__ import annotations

import math
from typing import Callable

import plotly.graph_objects as go

from perfgate.dashboard.compare import Pairs
from perfgate.trend.analysis import Series

PLOTLY_JS = "plotly.min.js"
CONFIG = {"displaylogo": False, "responsive": True}
WORSE, BETTER, POINTS, MEANS = "#d62728", "#2ca02c", "#1f77b4", "#ff7f0e"


def div(figure: go.Figure, element_id: str, config: dict | None = None) -> str:
    """The figure as an HTML fragment that expects plotly.js already loaded by the page."""
    return figure.to_html(full_html=False, include_plotlyjs=False, div_id=element_id, config=config or CONFIG)


def sparkline(one: Series, element_id: str) -> str:
    """The series in a cell: its values, oldest first, and the newest change point."""
    figure = go.Figure(go.Scatter(y=one.values, mode="lines", line={"width": 1.5, "color": POINTS},
                                  hoverinfo="y"))
    for change in one.changes[-1:]:
        figure.add_vline(x=change.index - 0.5, line={"color": WORSE if one.worse(change) else BETTER, "dash": "dot"})
    figure.update_layout(width=160, height=40, margin={"l": 0, "r": 0, "t": 0, "b": 0}, showlegend=False,
                         xaxis={"visible": False}, yaxis={"visible": False}, plot_bgcolor="rgba(0,0,0,0)")
    return div(figure, element_id, {"displayModeBar": False, "staticPlot": False})


def history(one: Series, run_page: Callable[[int], str], commit_link: Callable[[str | None], str | None],
            element_id: str) -> str:
    """One metric over its results: each point links to its run page (click), the hover names the commit and the
    verdict, each change point is a dashed line (red worse, green better) and each segment's mean a line."""
    points = one.points
    hover = [f"#{i + 1} {p.recorded_at:%Y-%m-%d %H:%M}<br>commit {(p.commit or '?')[:12]} {p.branch or ''}<br>"
             f"{p.value:,.4g} {one.unit}<br>{p.metric_verdict or p.verdict}" for i, p in enumerate(points)]
    figure = go.Figure(go.Scatter(
        x=list(range(1, len(points) + 1)), y=one.values, mode="lines+markers", name=one.metric,
        marker={"color": [WORSE if (p.metric_verdict or p.verdict) == "FAIL" else POINTS for p in points]},
        line={"color": POINTS, "width": 1}, text=hover, hoverinfo="text",
        customdata=[[run_page(p.result_id), commit_link(p.commit) or ""] for p in points]))
    for start, end, mean in one.segments():
        figure.add_shape(type="line", x0=start + 0.5, x1=end + 0.5, y0=mean, y1=mean,
                         line={"color": MEANS, "width": 3})
    for change in one.changes:
        commit = (points[change.index].commit or "?")[:8]
        figure.add_vline(x=change.index + 0.5, line={"color": WORSE if one.worse(change) else BETTER, "dash": "dash"},
                         annotation_text=f"{commit} {change.change:+.1%}", annotation_position="top")
    figure.update_layout(title=f"{one.metric} ({one.unit or '-'})", height=320, margin={"t": 50, "b": 40},
                         xaxis_title="result (oldest first)", yaxis_title=one.unit or one.metric, showlegend=False)
    return div(figure, element_id)


def pairs(found: Pairs, element_id: str) -> str:
    """An A/B session's metric pair by pair: each pair's candidate against its reference, the change (their geometric
    mean) and its interval as a band, and no change as a line at zero."""
    ratios = [100.0 * ratio for ratio in found.ratios]
    figure = go.Figure(go.Scatter(
        x=list(range(1, len(ratios) + 1)), y=ratios, mode="markers", name="pairs", marker={"color": POINTS, "size": 9},
        text=[f"pair {i + 1}: candidate {cand:,.4g} vs reference {ref:,.4g}" for i, (ref, cand) in
              enumerate(zip(found.reference, found.candidate))], hoverinfo="text"))
    figure.add_hline(y=0.0, line={"color": "#888", "width": 1})
    if found.change is not None:
        figure.add_hline(y=100.0 * found.change, line={"color": MEANS, "width": 2},
                         annotation_text=f"change {found.change:+.1%}", annotation_position="top left")
    if found.ci is not None and all(math.isfinite(end) for end in found.ci):
        figure.add_hrect(y0=100.0 * found.ci[0], y1=100.0 * found.ci[1], fillcolor=MEANS, opacity=0.15, line_width=0)
    figure.update_layout(title=f"{found.metric}: candidate vs reference, pair by pair", height=300,
                         margin={"t": 50, "b": 40}, xaxis={"title": "pair", "dtick": 1},
                         yaxis_title="candidate / reference - 1 (%)", showlegend=False)
    return div(figure, element_id)
