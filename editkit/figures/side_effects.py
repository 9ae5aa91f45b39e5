"""Plotly figures for the side-effect views (sweep, bleed map, layer sweep). Data in, figure out: no Streamlit, so
the app, notebooks and tests draw the same charts."""
from __future__ import annotations

import plotly.graph_objects as go

from .theme import figure, legend_below, subplots

RATE_COLORS = {"efficacy": "#1b9e77", "generalization": "#7570b3", "specificity": "#d95f02"}
SOURCE_COLORS = {"rewrite": "#1b9e77", "paraphrase": "#7570b3", "neighborhood": "#d95f02", "known fact": "#e7298a",
                 "extra": "#666666"}


def _mean(cell):
    return None if cell is None else cell.get("mean") if isinstance(cell, dict) else cell


def _ci(cell):
    return (cell or {}).get("ci95") or 0 if isinstance(cell, dict) else 0


def pareto_figure(out: dict, ys=("efficacy", "generalization")) -> go.Figure:
    """Each setting of a sweep as a point (x = specificity, y = efficacy / generalization, 95% bars), the 2-D
    Pareto front of each as a line, the unedited model as a cross."""
    rows = out["settings"]
    fig = figure()
    symbols = {"efficacy": "circle", "generalization": "diamond", "gen_efficacy": "square",
               "gen_generalization": "triangle-up"}
    for y in ys:
        color = RATE_COLORS.get(y, "#1f78b4")
        fig.add_trace(go.Scatter(
            x=[_mean(r["specificity"]) for r in rows], y=[_mean(r[y]) for r in rows], mode="markers", name=y,
            marker={"color": color, "symbol": symbols.get(y, "circle"), "size": 10,
                    "line": {"width": [2 if r["pareto"] else 0 for r in rows], "color": "black"}},
            error_x={"type": "data", "array": [_ci(r["specificity"]) for r in rows], "thickness": 1, "width": 0},
            error_y={"type": "data", "array": [_ci(r[y]) for r in rows], "thickness": 1, "width": 0},
            text=[r["label"] for r in rows],
            hovertemplate="%{text}<br>specificity %{x:.1f}<br>" + y + " %{y:.1f}<extra></extra>"))
        front = out["fronts"][y]  # the 2-D front, sorted by specificity (evaluation/sweep.front_2d)
        fig.add_trace(go.Scatter(x=[_mean(rows[i]["specificity"]) for i in front],
                                 y=[_mean(rows[i][y]) for i in front], mode="lines", showlegend=False,
                                 line={"color": color, "dash": "dot"}, hoverinfo="skip"))
    u = out.get("unedited") or {}
    if _mean(u.get("specificity")) is not None:
        fig.add_vline(x=_mean(u["specificity"]), line_dash="dash", line_color="grey",
                      annotation_text="unedited specificity", annotation_position="bottom left")
    fig.update_layout(xaxis_title="specificity (neighbours keep their true answer, %)",
                      yaxis_title="success rate (%)", height=420, margin={"t": 30},
                      title=f"{out['method']} on {out['set']}, {out['n']} records per setting "
                            "(outlined: Pareto-optimal)")
    return fig


def bleed_figure(out: dict) -> go.Figure:
    """One point per prompt: the update's predicted share s (x) against the measured rise of P(new) (y); for a
    method without a prediction (no share), the rises by prompt."""
    predicted = out.get("formula") is not None
    fig = figure()
    for source, color in SOURCE_COLORS.items():
        index = [i for i, r in enumerate(out["rows"]) if r["source"] == source]
        rows = [out["rows"][i] for i in index]
        if not rows:
            continue
        where = "largest share at %{customdata[1]!r}: s = %{x:.3f}<br>" if predicted else ""
        fig.add_trace(go.Scatter(
            x=[r["share"] for r in rows] if predicted else index, y=[r["delta_p_new"] for r in rows],
            mode="markers", name=source, marker={"color": color, "size": 9},
            customdata=[[r["prompt"], r["token"], r["p_new_before"], r["p_new_after"]] for r in rows],
            hovertemplate="%{customdata[0]}<br>" + where +
                          "P(new) %{customdata[2]:.3f} → %{customdata[3]:.3f}<extra></extra>"))
    if predicted:
        fig.add_vline(x=0, line_color="lightgrey")
    fig.add_hline(y=0, line_color="lightgrey")
    fig.update_layout(xaxis_title=(out.get("share_axis") or "predicted share s") if predicted
                      else f"prompt # ({out['method']} predicts no share)",
                      yaxis_title=f"rise of P({out['request']['target_new'].strip()})", height=420,
                      margin={"t": 30})
    return fig


def layer_sweep_figure(out: dict) -> go.Figure:
    """Top: the request's causal trace (tokens x layers); bottom, on the same layer axis: the edit's efficacy,
    generalization and specificity magnitudes at each edited layer; the trace's peak and the default layer
    marked."""
    t = out.get("trace")
    rows = out["rows"]
    n_top = 1 if t else 0
    fig = subplots(rows=1 + n_top, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                   row_heights=[0.45, 0.55] if t else [1.0])
    if t:
        tr = t["trace"]
        b, e = tr["subject_range"]
        labels = [f"{i}: {tok!r}{'*' if b <= i < e else ''}" for i, tok in enumerate(tr["tokens"])]
        fig.add_trace(go.Heatmap(z=tr["scores"], y=labels, x=list(range(len(tr["scores"][0]))),
                                 colorscale={"hidden": "Purples", "mlp": "Greens", "attn": "Reds"}[t["kind"]],
                                 zmin=tr["low_score"], showscale=False,
                                 hovertemplate="%{y}<br>layer %{x}<br>p = %{z:.3f}<extra></extra>"), row=1, col=1)
        fig.update_yaxes(autorange="reversed", row=1, col=1)
    x = [r["layer"] for r in rows]
    for key, label in (("efficacy_magnitude", "efficacy"), ("generalization_magnitude", "generalization"),
                       ("specificity_magnitude", "specificity")):
        fig.add_trace(go.Scatter(x=x, y=[r[key] for r in rows], mode="lines+markers", name=label,
                                 line={"color": RATE_COLORS[label]}), row=1 + n_top, col=1)
    if t:
        low, high = t["low_score"], t["high_score"]
        norm = [(s - low) / (high - low) if high != low else 0 for s in t["scores"]]
        fig.add_trace(go.Scatter(x=list(range(len(norm))), y=norm, mode="lines", name=f"trace at {t['token']!r} "
                                 "(recovered share)", line={"color": "black", "dash": "dot"}), row=1 + n_top, col=1)
        fig.add_vline(x=t["peak_layer"], line_color="black", line_dash="dash",
                      annotation_text=f"trace peak (layer {t['peak_layer']})")
    for layer in out.get("default_layers", []):
        fig.add_vline(x=layer, line_color="grey", line_dash="dot", annotation_text="default",
                      annotation_position="bottom right")
    fig.update_yaxes(title_text="P(new) − P(true) etc.", row=1 + n_top, col=1)
    fig.update_xaxes(title_text="layer", row=1 + n_top, col=1)
    fig.update_layout(height=620 if t else 380, margin={"t": 30, "b": 30})
    legend_below(fig)
    return fig


def sweep_table(out: dict) -> list[dict]:
    """The sweep as table rows: the unedited model first, then each setting's rates (x100) and Pareto mark."""
    def cell(c):
        return None if c is None or c.get("mean") is None else round(c["mean"], 1)

    u = out.get("unedited") or {}
    rows = [{"setting": "unedited model", "efficacy": cell(u.get("efficacy")),
             "generalization": cell(u.get("generalization")), "specificity": cell(u.get("specificity")),
             "generation efficacy": cell(u.get("gen_efficacy"))}]
    for r in out["settings"]:
        rows.append({"setting": r["label"], "Pareto": "★" if r["pareto"] else "", "efficacy": cell(r["efficacy"]),
                     "generalization": cell(r["generalization"]), "specificity": cell(r["specificity"]),
                     "generation efficacy": cell(r.get("gen_efficacy")),
                     "score": None if r["score"] is None else round(r["score"], 1), "cached": r.get("cached")})
    return rows
