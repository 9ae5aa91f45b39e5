"""The spectrum of AlphaEdit's key statistics C per edited layer (data: editing.spectrum.spectrum): eigenvalues on a
log scale, one line per layer, the null-space cut dashed and the null space shaded."""
from __future__ import annotations

import plotly.graph_objects as go

from .theme import TITLE_FONT, figure, legend_below


def spectrum_figure(spec: dict) -> go.Figure:
    """Plotly figure: eigenvalues (largest first, log scale) per layer, the null-space cut as a dashed line."""
    palette = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]
    fig = figure()
    for i, row in enumerate(spec["layers"]):
        color = palette[i % len(palette)]
        n = row["width"]
        fig.add_trace(go.Scatter(x=list(range(1, n + 1)), y=[max(v, 1e-12) for v in row["eigenvalues"]],
                                 mode="lines", line={"color": color},
                                 name=f"layer {row['layer']}: null space {row['null_dimension']}/{n} "
                                      f"({100 * row['null_energy']:.1f}% of E||k||²)"))
        if row["cut"] is not None:
            fig.add_trace(go.Scatter(x=[1, n], y=[max(row["cut"], 1e-12)] * 2, mode="lines", showlegend=False,
                                     line={"color": color, "dash": "dash", "width": 1},
                                     hovertemplate=f"layer {row['layer']} cut %{{y:.3g}}<extra></extra>"))
            fig.add_vrect(x0=n - row["null_dimension"] + 0.5, x1=n + 0.5, fillcolor=color, opacity=0.06,
                          line_width=0)
    fig.update_yaxes(type="log", title="eigenvalue of C = E[k kᵀ]")
    fig.update_xaxes(title="eigen-direction (largest eigenvalue first)")
    fig.update_layout(height=420, margin={"t": 40, "b": 30},
                      title={"text": f"{spec['model']}: null space = {spec['rule_meaning'].split(':')[0]} "
                                     f"(threshold {spec['threshold']:g}); shaded: where AlphaEdit may write",
                             "font": {"size": TITLE_FONT}})
    legend_below(fig)
    return fig
