"""Predictions as bars, and the logit lens as a heatmap: each layer's residual stream read through the final norm and
unembedding, its top tokens per rank (data: editkit/lens.py's JSON)."""
from __future__ import annotations

import plotly.graph_objects as go


def logit_lens_figure(lens: dict, k: int) -> go.Figure:
    """Layers (rows) x rank 1..k (columns), coloured by probability and labelled with the token."""
    layers = lens["layers"]
    probs = [[t["prob"] for t in row] for row in layers]
    text = [[t["token"] for t in row] for row in layers]
    fig = go.Figure(go.Heatmap(
        z=probs, text=text, texttemplate="%{text}", colorscale="Blues", zmin=0, zmax=1,
        x=[f"#{i + 1}" for i in range(k)], y=[f"L{l}" for l in range(len(layers))],
        hovertemplate="layer %{y}, rank %{x}<br>%{text}: p=%{z:.3f}<extra></extra>",
        colorbar={"title": "p"},
    ))
    fig.update_layout(title=f"Logit lens at the last token ({lens['tokens'][-1]!r})",
                      xaxis_title="rank", yaxis_title="layer", height=120 + 26 * len(layers),
                      margin={"t": 40, "b": 30})
    return fig


def predictions_figure(preds: dict) -> go.Figure:
    """The top next tokens' probabilities as horizontal bars, the most likely on top (Predictions.to_json())."""
    rows = preds["predictions"]
    fig = go.Figure(go.Bar(x=[p["prob"] for p in rows], y=[repr(p["token"]) for p in rows], orientation="h",
                           marker_color="#1f77b4", hovertemplate="%{y}: p = %{x:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title={"text": f"Next token after {preds['prompt'][-60:]!r}", "font": {"size": 13}},
                      xaxis_title="probability", height=120 + 26 * len(rows), margin={"t": 40, "b": 30})
    return fig
