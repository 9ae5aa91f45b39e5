"""Plotly figures of traces (the page lays them out; they are plain functions of JSON results).

    heatmap(result.to_json())             # one panel, ROME's colours (Purples / Greens / Reds)
    heatmap(preview.to_json())            # an attribution-patching estimate: titled and coloured as an estimate
    trace_panels(traces.to_json())        # the kinds of one prompt side by side
    severing_figure(tracer.severing())    # ROME Fig. 4
    aie_figure(aie, "mlp")                # ROME Fig. 2, one kind
    aie_panels(aie)                       # ROME Fig. 2, the three kinds side by side (the README's figure)
    aie_depth(runs, "mlp", "last subject")  # several models' AIE runs on a relative depth axis
    heatmap(r, relative=True)             # layers on a relative depth axis, l / (n_layers - 1)
    depth_comparison({"gemma-3-270m": r1, "smollm2-135m": r2})   # one fact on two models, relative depth
"""
from __future__ import annotations

import plotly.graph_objects as go

from ..core.results import jsons_of
from .theme import TITLE_FONT, WIDTHS, figure, legend_below, subplots

COLORS = {"hidden": "Purples", "mlp": "Greens", "attn": "Reds"}
TITLES = {"hidden": "single restored hidden state", "mlp": "restored MLP outputs",
          "attn": "restored attention outputs"}
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def relative_depth(n_layers: int) -> list[float]:
    """Layer l at l / (n_layers - 1): 0 is the first layer and 1 the last, so models of different depths line up
    (a one-layer model sits at 0)."""
    return [l / max(n_layers - 1, 1) for l in range(n_layers)]


def restored_share(r: dict, token: int) -> list[float]:
    """(p - p_corrupted) / (p_clean - p_corrupted) per layer at `token`: the share of the answer's probability a
    restoration brings back, comparable across models whose clean and corrupted p differ (0 when they are equal)."""
    gap = r["high_score"] - r["low_score"]
    return [(p - r["low_score"]) / gap if gap else 0.0 for p in r["scores"][token]]


def _labels(r: dict) -> list[str]:
    """Token labels "i: 'tok'", a * on the subject's tokens."""
    b, e = r["subject_range"]
    return [f"{i}: {t!r}{'*' if b <= i < e else ''}" for i, t in enumerate(r["tokens"])]


def _panel(r: dict, relative: bool = False) -> tuple[go.Heatmap, str]:
    """One trace's heatmap trace and its title (ROME's colours; an estimate in grey, titled as one)."""
    estimate = bool(r.get("meta", {}).get("estimate"))
    ie = r.get("indirect_effect") or [[s - r["low_score"] for s in row] for row in r["scores"]]
    title = TITLES[r["kind"]] + (f", window {r['window']}" if r["kind"] != "hidden" else "")
    if estimate:
        title = f"{_estimate_label(r.get('meta', {}).get('agreement'))}<br>{title}"
    n_layers = len(r["scores"][0])
    panel = go.Heatmap(
        z=r["scores"], x=relative_depth(n_layers) if relative else list(range(n_layers)), y=_labels(r),
        colorscale="Greys" if estimate else COLORS[r["kind"]], zmin=r["low_score"],
        zmax=max(r["high_score"], max(max(row) for row in r["scores"])) if estimate else None,
        customdata=ie, colorbar={"title": f"p({r['answer']!r})" + (" est." if estimate else "")},
        hovertemplate="token %{y}<br>" + ("depth %{x:.2f}" if relative else "layer %{x}")
        + "<br>p = %{z:.3f}<br>IE = %{customdata:.3f}<extra></extra>",
    )
    return panel, title


def _estimate_label(agreement: dict | None) -> str:
    """An estimate's first title line: what it is, and how far its panel agrees with the exact one, as
    measured over known facts (tracing/agreement.py), or that it is poor there."""
    if not agreement or agreement.get("poor") is None:
        return "ESTIMATE (attribution patching)"
    if agreement["poor"]:
        return "ESTIMATE, POOR on this panel: trace it"
    rho, facts = agreement["spearman_mean"], agreement["facts"]
    return f"ESTIMATE (attribution patching, ρ {rho:.2f} on {facts} facts)"


def heatmap(r: dict, relative: bool = False) -> go.Figure:
    """A (token x layer) heatmap of restored p(answer); an estimate (meta.estimate) says so in its title and uses a
    grey scale, so it is never mistaken for the exact trace. relative=True puts layer l at l / (n_layers - 1)."""
    panel, title = _panel(r, relative)
    n_layers = len(r["scores"][0])
    fig = figure(panel)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title={"text": title, "font": {"size": 13}},
                      xaxis_title=f"relative depth, layer / {n_layers - 1}" if relative else "layer",
                      height=140 + 28 * len(r["tokens"]), margin={"t": 60 if "<br>" in title else 40, "b": 40})
    return fig


def trace_panels(traces: dict[str, dict]) -> go.Figure:
    """The kinds of one traced prompt side by side (kind -> TraceResult JSON), tokens shared down the left, each
    panel with its own colour bar: the tracing page's row of heatmaps as one figure (notebooks, the manual)."""
    kinds = list(traces)
    n = len(kinds)
    gap = 0.1
    width = (1 - gap * (n - 1)) / n
    fig = subplots(rows=1, cols=n, shared_yaxes=True, horizontal_spacing=gap,
                   subplot_titles=[_panel(traces[k])[1] for k in kinds])
    for col, kind in enumerate(kinds, 1):
        panel, _ = _panel(traces[kind])
        panel.colorbar.update(x=col * width + (col - 1) * gap + 0.01, len=0.9, thickness=12)
        fig.add_trace(panel, row=1, col=col)
        fig.update_xaxes(title_text="layer", row=1, col=col)
    first = traces[kinds[0]]
    fig.update_yaxes(autorange="reversed")
    fig.update_annotations(font_size=12)
    fig.update_layout(title={"text": f"p({first['answer']!r}) with one state restored (clean "
                                     f"{first['high_score']:.3f}, corrupted {first['low_score']:.3f})",
                             "font": {"size": 13}},
                      height=160 + 28 * len(first["tokens"]), width=max(420 * n, 600), margin={"t": 70, "b": 40})
    return fig


def severing_figure(sev: dict) -> go.Figure:
    fig = figure()
    for key, name, color in (("none", "no severing", "purple"), ("mlp", "MLPs severed", "green"),
                             ("attn", "attention severed", "red")):
        fig.add_trace(go.Scatter(x=sev["layers"], y=sev[key], name=name, line={"color": color}))
    fig.add_hline(y=sev["low_score"], line_dash="dot", annotation_text="corrupted")
    # titled, with a top margin to fit (the default 100 px left an empty band above an untitled plot)
    fig.update_layout(title={"text": f"severing at {sev['token_str']!r}: the hidden state restored, the later MLPs "
                                     "or attention kept corrupted", "font": {"size": 13}},
                      xaxis_title="layer of the restored hidden state", yaxis_title="p(answer)", height=350,
                      margin={"t": 40})
    return fig


def _band(fig: go.Figure, x: list, s: dict, name: str, color: str, **where) -> None:
    """A mean curve with its 95% band (s: {"mean", "low", "high"}); `where` places it in a subplot."""
    fig.add_trace(go.Scatter(x=x + x[::-1], y=s["high"] + s["low"][::-1], mode="lines", fill="toself",
                             fillcolor=color, opacity=0.15, line={"width": 0}, showlegend=False,
                             hoverinfo="skip"), **where)
    fig.add_trace(go.Scatter(x=x, y=s["mean"], name=name, line={"color": color}, legendgroup=name,
                             showlegend=not where or where.get("col") == 1), **where)


def aie_figure(aie: dict, kind: str) -> go.Figure:
    fig = figure()
    layers = list(range(aie["layers"]))
    for c, color in zip(aie["classes"], PALETTE):
        if aie["kinds"][kind].get(c):
            _band(fig, layers, aie["kinds"][kind][c], c, color)
    fig.update_layout(title={"text": f"AIE, {kind} (N = {aie['n_facts']})", "font": {"size": TITLE_FONT}},
                      xaxis_title="layer", height=380, margin={"t": 40, "b": 30, "l": 60, "r": 20})
    legend_below(fig, width=WIDTHS["third"])
    return fig


def aie_panels(aie: dict) -> go.Figure:
    """ROME Fig. 2 in one figure: the three kinds side by side, one curve per token class, with 95% bands."""
    kinds = list(aie["kinds"])
    fig = subplots(rows=1, cols=len(kinds), subplot_titles=[TITLES.get(k, k) for k in kinds])
    layers = list(range(aie["layers"]))
    for col, kind in enumerate(kinds, 1):
        for c, color in zip(aie["classes"], PALETTE):
            if aie["kinds"][kind].get(c):
                _band(fig, layers, aie["kinds"][kind][c], c, color, row=1, col=col)
        fig.update_xaxes(title_text="layer", row=1, col=col)
    fig.update_yaxes(title_text="AIE = p(restored) − p(corrupted)", row=1, col=1)
    fig.update_layout(title=f"{aie.get('model', '')}: average indirect effect over {aie['n_facts']} known facts "
                            f"({aie['samples']} noise samples, window {aie['window']})",
                      height=420, margin={"b": 30})
    legend_below(fig)
    return fig


def token_phrase(token_class: str) -> str:
    """A token class as words after "at the": "last subject token", "last token" (not "last token token"),
    "further tokens"."""
    return token_class if token_class.endswith(("token", "tokens")) else f"{token_class} token"


def aie_depth(runs: dict, kind: str, token_class: str) -> go.Figure:
    """One kind and token class of several models' AIE runs (name -> run) on a relative depth axis, with bands:
    where each model's average effect sits, whatever its number of layers."""
    runs = jsons_of(runs)
    fig = figure()
    for (name, run), color in zip(runs.items(), PALETTE):
        s = run["kinds"][kind].get(token_class)
        if s:
            label = f"{name} ({run['layers']} layers, N = {s['n']})"
            _band(fig, relative_depth(run["layers"]), s, label, color)
    fig.update_layout(title={"text": f"AIE, {TITLES.get(kind, kind)} at the {token_phrase(token_class)}",
                             "font": {"size": 13}},
                      xaxis_title="relative depth, layer / (n_layers - 1)", yaxis_title="AIE", height=380,
                      margin={"b": 30})
    legend_below(fig, width=WIDTHS["half"])
    fig.update_xaxes(range=[-0.02, 1.02])
    return fig


def depth_comparison(traces: dict, peaks: dict | None = None) -> go.Figure:
    """One fact traced on several models (name -> result of one kind): per model, the share of p(answer)
    restored at its last subject token (restored_share) over relative depth, so a student sees where each
    model recalls the fact whatever its number of layers; the peak of each model is marked and named with its
    layer. `peaks`: name -> the peak worth naming (evaluation/depth.py; None for a flat curve, drawn without a
    mark and said so in its legend entry); default: each curve's largest value."""
    traces = jsons_of(traces)
    fig = figure()
    kinds = set()
    for (name, r), color in zip(traces.items(), PALETTE):
        kinds.add(r["kind"])
        token = r["subject_range"][1] - 1
        share, depth = restored_share(r, token), relative_depth(len(r["scores"][0]))
        named = peaks.get(name) if peaks is not None else None
        peak = named.index if named is not None else (
            max(range(len(share)), key=share.__getitem__) if peaks is None else None)
        flat = "" if peak is not None else " (no peak worth naming)"
        fig.add_trace(go.Scatter(
            x=depth, y=share, name=f"{name}: {r['tokens'][token]!r} -> {r['answer']!r}{flat}",
            line={"color": color}, customdata=list(range(len(share))),
            hovertemplate="layer %{customdata}<br>depth %{x:.2f}<br>share %{y:.2f}<extra></extra>"))
        if peak is not None:
            fig.add_trace(go.Scatter(x=[depth[peak]], y=[share[peak]], mode="markers+text", showlegend=False,
                                     marker={"color": color, "size": 10}, text=[f"layer {peak}"],
                                     textposition="top center", hoverinfo="skip"))
    what = TITLES[kinds.pop()] if len(kinds) == 1 else "restored states"
    fig.update_layout(title={"text": f"{what} at the last subject token, by relative depth", "font": {"size": 13}},
                      xaxis_title="relative depth, layer / (n_layers - 1)",
                      yaxis_title="share of p(answer) restored", height=380, margin={"b": 30})
    legend_below(fig)
    fig.update_xaxes(range=[-0.02, 1.02])
    return fig
