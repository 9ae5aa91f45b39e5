"""Plotly figures of lifelong-editing runs (data: evaluation/lifelong.py): one panel per metric, one curve per
method in its registry colour; hollow markers are checkpoints measured on a sample of the edits so far."""
from __future__ import annotations

from ..evaluation.lifelong import METRICS, curves

PANELS = ("efficacy", "generalization", "specificity", "retention", "fluency", "perplexity_ratio",
          "total_relative_norm")
# ratios that grow by orders of magnitude once a method collapses (perplexity 10^5 x the base, ||dW|| 100 x ||W||):
# on a linear axis one collapsed curve would flatten every other method's
LOG_PANELS = frozenset({"perplexity_ratio", "total_relative_norm"})


def _style(method: str) -> tuple[str, str]:
    from ..editing.methods import get
    from ..errors import EditkitError

    try:
        m = get(method)
        return m.label, m.color
    except EditkitError:
        return method, "#555555"


def lifelong_figure(results: dict, panels=PANELS, columns: int = 4):
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    data = curves(results)
    rows = (len(panels) + columns - 1) // columns
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=[METRICS[p][0] for p in panels],
                        horizontal_spacing=0.06, vertical_spacing=0.14)
    for method, series in data.items():
        label, color = _style(method)
        for i, panel in enumerate(panels):
            s = series[panel]
            if not s["x"]:
                continue
            symbols = ["circle-open" if sampled else "circle" for sampled in s["sampled"]]
            fig.add_trace(go.Scatter(x=s["x"], y=s["y"], mode="lines+markers", name=label, legendgroup=method,
                                     showlegend=i == 0, line={"color": color},
                                     marker={"symbol": symbols, "size": 6, "color": color}),
                          row=i // columns + 1, col=i % columns + 1)
    for i, panel in enumerate(panels):
        fig.update_xaxes(title_text="edits" if i // columns == rows - 1 else None, row=i // columns + 1,
                         col=i % columns + 1)
        fig.update_yaxes(title_text=METRICS[panel][2], title_font={"size": 10}, row=i // columns + 1,
                         col=i % columns + 1, type="log" if panel in LOG_PANELS else "linear")
    fig.update_layout(height=300 * rows + 60, margin={"t": 50}, legend={"orientation": "h", "y": 1.08},
                      title="Lifelong editing: metrics of all edits so far after each checkpoint "
                            "(hollow markers: a fixed random sample of them)")
    return fig
