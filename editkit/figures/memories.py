"""Figures of FFN key-value memories (Geva et al. 2021): the memories at one token ranked by contribution, and the
layer-level analyses of Figs. 5, 8 and 9 (data: memories.inspect.memories_at(...).to_json()["memories"],
memories.geva.analyses(...).to_json())."""
from __future__ import annotations

import plotly.graph_objects as go

from .theme import TITLE_FONT, WIDTHS, figure, legend_below


def contributions_figure(memories: list[dict]) -> go.Figure:
    """Horizontal bars of |m_i| ||v_i||, largest on top; green for m_i >= 0, red for m_i < 0."""
    fig = figure(go.Bar(
        x=[m["contribution"] for m in memories][::-1], y=[m["label"] for m in memories][::-1], orientation="h",
        marker_color=["#2a9d8f" if m["coefficient"] >= 0 else "#e76f51" for m in memories][::-1],
        hovertemplate="%{y}: %{x:.3f}<extra></extra>",
    ))
    fig.update_layout(title={"text": "|m_i| · ||v_i|| (green m>0, red m<0)", "font": {"size": TITLE_FONT}},
                      height=120 + 24 * len(memories), margin={"t": 40, "b": 30})
    return fig


def agreement_figure(g: dict) -> go.Figure:
    """Fig. 5: per layer, how often a value's top token is its key's top trigger's next token, and that token's
    median rank (log axis on the right)."""
    layers = list(range(len(g["agreement"])))
    fig = figure(go.Bar(x=layers, y=g["agreement"], name="agreement"))
    fig.add_trace(go.Scatter(x=layers, y=g["median_rank"], name="median rank", yaxis="y2", mode="lines+markers"))
    fig.update_layout(title={"text": "Fig. 5: value = trigger's next", "font": {"size": TITLE_FONT}},
                      xaxis_title="layer", yaxis={"title": "agreement rate"},
                      yaxis2={"title": "rank of next token", "overlaying": "y", "side": "right", "type": "log"},
                      height=360, margin={"t": 40, "b": 30, "l": 60, "r": 60})
    legend_below(fig, width=WIDTHS["third"])
    return fig


def composition_figure(g: dict) -> go.Figure:
    """Fig. 8: per layer, the share of FFN outputs whose top token is none of its top memories' top tokens."""
    layers = list(range(len(g["compositional"])))
    fig = figure(go.Bar(x=layers, y=g["compositional"]))
    fig.update_layout(title={"text": "Fig. 8: compositional outputs", "font": {"size": TITLE_FONT}},
                      xaxis_title="layer", yaxis_title="share", yaxis_range=[0, 1], height=360,
                      margin={"t": 40, "b": 50, "l": 60, "r": 20})
    return fig


def fixed_figure(g: dict) -> go.Figure:
    """Fig. 9: per layer, the share of positions whose prediction is fixed at (bars) and by (line) that layer."""
    layers = list(range(len(g["fixed_at"])))
    fig = figure(go.Bar(x=layers, y=g["fixed_at"], name="fixed at l"))
    fig.add_trace(go.Scatter(x=layers, y=g["fixed_by"], name="fixed by l", mode="lines+markers"))
    fig.update_layout(title={"text": "Fig. 9: prediction fixed at layer", "font": {"size": TITLE_FONT}},
                      xaxis_title="layer", yaxis_title="share of positions", yaxis_range=[0, 1], height=360,
                      margin={"t": 40, "b": 30, "l": 60, "r": 20})
    legend_below(fig, width=WIDTHS["third"])
    return fig
