"""Plotly figures of traces (the page lays them out; they are plain functions of JSON results).

    heatmap(result.to_dict())             # one panel, ROME's colours (Purples / Greens / Reds)
    heatmap(preview.to_dict())            # an attribution-patching estimate: titled and coloured as an estimate
    severing_figure(tracer.severing())    # ROME Fig. 4
    aie_figure(aie, "mlp")                # ROME Fig. 2, one kind
"""
from __future__ import annotations

import plotly.graph_objects as go

COLORS = {"hidden": "Purples", "mlp": "Greens", "attn": "Reds"}
TITLES = {"hidden": "single restored hidden state", "mlp": "restored MLP outputs (window)",
          "attn": "restored attention outputs (window)"}
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def heatmap(r: dict) -> go.Figure:
    """A (token x layer) heatmap of restored p(answer); an estimate (meta.estimate) says so in its title and uses a
    grey scale, so it is never mistaken for the exact trace."""
    estimate = bool(r.get("meta", {}).get("estimate"))
    b, e = r["subject_range"]
    labels = [f"{i}: {t!r}{'*' if b <= i < e else ''}" for i, t in enumerate(r["tokens"])]
    ie = r.get("indirect_effect") or [[s - r["low_score"] for s in row] for row in r["scores"]]
    title = TITLES[r["kind"]] + (f", window {r['window']}" if r["kind"] != "hidden" else "")
    if estimate:
        title = f"ESTIMATE (attribution patching): {title}"
    fig = go.Figure(go.Heatmap(
        z=r["scores"], x=list(range(len(r["scores"][0]))), y=labels,
        colorscale="Greys" if estimate else COLORS[r["kind"]], zmin=r["low_score"],
        zmax=max(r["high_score"], max(max(row) for row in r["scores"])) if estimate else None,
        customdata=ie, colorbar={"title": f"p({r['answer']!r})" + (" est." if estimate else "")},
        hovertemplate="token %{y}<br>layer %{x}<br>p = %{z:.3f}<br>IE = %{customdata:.3f}<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title={"text": title, "font": {"size": 13}}, xaxis_title="layer",
                      height=140 + 28 * len(labels), margin={"t": 40, "b": 40})
    return fig


def severing_figure(sev: dict) -> go.Figure:
    fig = go.Figure()
    for key, name, color in (("none", "no severing", "purple"), ("mlp", "MLPs severed", "green"),
                             ("attn", "attention severed", "red")):
        fig.add_trace(go.Scatter(x=sev["layers"], y=sev[key], name=name, line={"color": color}))
    fig.add_hline(y=sev["low_score"], line_dash="dot", annotation_text="corrupted")
    fig.update_layout(xaxis_title="layer of the restored hidden state", yaxis_title="p(answer)", height=350)
    return fig


def aie_figure(aie: dict, kind: str) -> go.Figure:
    fig = go.Figure()
    layers = list(range(aie["layers"]))
    for c, color in zip(aie["classes"], PALETTE):
        s = aie["kinds"][kind].get(c)
        if not s:
            continue
        fig.add_trace(go.Scatter(x=layers + layers[::-1], y=s["high"] + s["low"][::-1], fill="toself",
                                 fillcolor=color, opacity=0.15, line={"width": 0}, showlegend=False,
                                 hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=layers, y=s["mean"], name=c, line={"color": color}))
    fig.update_layout(title=f"AIE, {kind} (N = {aie['n_facts']})", xaxis_title="layer", height=380)
    return fig
