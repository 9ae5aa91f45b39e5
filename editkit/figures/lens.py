"""Predictions as bars, and the logit lens as a heatmap: each layer's residual stream read through the final norm and
unembedding, its top tokens per rank (data: editkit/lens.py's JSON). Layer 0 at the bottom, the last layer on top,
on every page."""
from __future__ import annotations

import plotly.graph_objects as go

from .theme import MIN_FONT, TITLE_FONT, WIDTHS, figure, text_width

MARGIN = {"l": 50, "r": 70, "t": 40, "b": 40}  # r: the colour bar and its labels


def fit(text: str, room: float, size: float = MIN_FONT) -> str:
    """`text` cut (with …) to fit `room` px at `size` px: plotly would otherwise shrink the whole cell's text."""
    if text_width(text, size) <= room:
        return text
    while text and text_width(text + "…", size) > room:
        text = text[:-1]
    return text + "…"


def logit_lens_figure(lens: dict, k: int, width: float = WIDTHS["three_quarters"], marked: str | None = None,
                      first_layer: int | None = None) -> go.Figure:
    """Layers (rows, layer 0 at the bottom) x rank 1..k (columns), coloured by probability and labelled with the
    token, cut to fit its cell at the page's `width` (the full token on hover). `marked`: a token starred wherever it
    appears; `first_layer`: the row where it first ranks first, outlined."""
    layers = lens["layers"]
    k = min(k, len(layers[0]))
    cell = (width - MARGIN["l"] - MARGIN["r"]) / k - 6
    probs = [[t["prob"] for t in row[:k]] for row in layers]
    full = [[("★ " if t["token"] == marked else "") + repr(t["token"])[1:-1] for t in row[:k]] for row in layers]
    fig = figure(go.Heatmap(
        z=probs, text=[[fit(t, cell) for t in row] for row in full], customdata=full, texttemplate="%{text}",
        textfont={"size": MIN_FONT}, colorscale="Blues", zmin=0, zmax=1,
        x=[f"#{i + 1}" for i in range(k)], y=[f"L{l}" for l in range(len(layers))],
        hovertemplate="layer %{y}, rank %{x}<br>%{customdata}: p=%{z:.3f}<extra></extra>",
        colorbar={"title": "p", "thickness": 12}))
    if first_layer is not None:  # an outline around the row, so no label covers a cell
        fig.add_shape(type="rect", x0=-0.5, x1=k - 0.5, y0=first_layer - 0.5, y1=first_layer + 0.5,
                      line={"color": "#d62728", "width": 2})
    fig.update_xaxes(type="category")
    fig.update_yaxes(type="category")
    fig.update_layout(title={"text": f"Logit lens at the last token ({lens['tokens'][-1]!r})",
                             "font": {"size": TITLE_FONT}},
                      xaxis_title="rank", yaxis_title="layer", height=100 + 26 * len(layers), margin=MARGIN)
    return fig


def predictions_figure(preds: dict) -> go.Figure:
    """The top next tokens' probabilities as horizontal bars, the most likely on top (Predictions.to_json())."""
    rows = preds["predictions"]
    fig = figure(go.Bar(x=[p["prob"] for p in rows], y=[repr(p["token"]) for p in rows], orientation="h",
                        marker_color="#1f77b4", hovertemplate="%{y}: p = %{x:.4f}<extra></extra>"))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title={"text": f"Next token after {preds['prompt'][-60:]!r}", "font": {"size": TITLE_FONT}},
                      xaxis_title="probability", height=120 + 26 * len(rows), margin={"t": 40, "b": 30})
    return fig
