"""A method's operating points (evaluation/points.py): the measured trade-off of its strength knob, today's default
marked, the point a user picked outlined. Data in (OperatingPoints' JSON), figure out."""
from __future__ import annotations

import plotly.graph_objects as go

from .theme import WIDTHS, legend_below

POINT, DEFAULT, PICKED = "#7570b3", "#1b9e77", "#d95f02"


def points_figure(points: dict, picked: int | None = None) -> go.Figure:
    """x = what the knob buys, y = what it keeps, one marker per measured setting joined in x order; the default a
    green star, the picked point an orange ring."""
    pts = points["points"]
    order = sorted(range(len(pts)), key=lambda i: pts[i]["x"])
    fig = go.Figure(go.Scatter(
        x=[pts[i]["x"] for i in order], y=[pts[i]["y"] for i in order], mode="lines+markers", name="measured",
        line={"color": POINT, "dash": "dot"}, marker={"color": POINT, "size": 9},
        text=[pts[i]["label"] for i in order],
        hovertemplate="%{text}<br>" + points["x_label"] + " %{x:.0f}<br>" + points["y_label"] + " %{y:.0f}"
                      "<extra></extra>"))
    for i, p in enumerate(pts):
        if p["default"]:
            fig.add_trace(go.Scatter(x=[p["x"]], y=[p["y"]], mode="markers", name=f"today's default ({p['label']})",
                                     marker={"color": DEFAULT, "size": 18, "symbol": "star"}, hoverinfo="skip"))
        if picked == i and not p["default"]:
            fig.add_trace(go.Scatter(x=[p["x"]], y=[p["y"]], mode="markers", name=f"your pick ({p['label']})",
                                     marker={"color": "rgba(0,0,0,0)", "size": 20,
                                             "line": {"color": PICKED, "width": 3}}, hoverinfo="skip"))
    fig.update_layout(xaxis_title=f"{points['x_label']} (%)", yaxis_title=f"{points['y_label']} (%)",
                      height=380, margin={"t": 50, "l": 70, "r": 30},
                      title=points.get("label", points["method"]))
    fig.update_xaxes(range=[-5, 105])
    fig.update_yaxes(range=[-5, 105])
    legend_below(fig, width=WIDTHS["half"])  # Edit & compare draws them two to a row
    return fig
