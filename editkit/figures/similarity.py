"""PMET's Fig. 2 (Li et al. 2023): per layer, how similar the states entering and leaving the attention (MHSA) and
FFN sub-layers are, with the 95% band (data: similarity.similarity(...).to_json())."""
from __future__ import annotations

import plotly.graph_objects as go

from .theme import WIDTHS, figure, legend_below

SUBLAYERS = (("mhsa", "#e76f51", "rgba(231,111,81,0.2)"), ("ffn", "#2a9d8f", "rgba(42,157,143,0.2)"))


def similarity_figure(r: dict, metric: str, title: str, y_range=None) -> go.Figure:
    """One curve per sub-layer of `metric` ("cos" or "jaccard"), layers counted from 1 as in PMET's figure."""
    fig = figure()
    x = [l + 1 for l in r["layers"]]
    for comp, color, fill in SUBLAYERS:
        m = r[f"{comp}_{metric}"]
        fig.add_trace(go.Scatter(x=x, y=m["high"], mode="lines", line={"width": 0}, showlegend=False,
                                 hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=x, y=m["low"], mode="lines", line={"width": 0}, fill="tonexty",
                                 fillcolor=fill, showlegend=False, hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=x, y=m["mean"], mode="lines+markers", name=comp.upper(), line={"color": color},
                                 customdata=list(zip(m["low"], m["high"])),
                                 hovertemplate="layer %{x}: %{y:.3f} [%{customdata[0]:.3f}, %{customdata[1]:.3f}]"
                                               "<extra>" + comp.upper() + "</extra>"))
    fig.update_layout(title=title, xaxis_title="layer", yaxis_title=title.split(" (")[0], yaxis_range=y_range,
                      height=380, margin={"t": 40, "b": 30})
    legend_below(fig, width=WIDTHS["half"])
    return fig
