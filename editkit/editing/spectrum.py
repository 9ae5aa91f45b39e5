"""Why AlphaEdit's projection protects old knowledge: the spectrum of C = E[k k^T] at each edited layer.

Keys of ordinary text fill only part of the key space: most of C's eigenvalues are orders of magnitude below the
largest. AlphaEdit (methods/alphaedit.py) lets an edit act only in the directions with the smallest eigenvalues
(the null space), where ordinary keys have almost no component, so what the layer does on ordinary text is kept.
`spectrum` returns, per layer, the eigenvalues (largest first), the cut the null-space rule puts on them, the
null-space dimension and the share of E||k||^2 inside it, with what upstream's absolute 2e-2 would select for
comparison (JSON-serializable); `spectrum_figure` draws it (log scale, one line per layer, the cut dashed).
"""
from __future__ import annotations

from .defaults import load_hparams
from .nullspace import NULL_RULES, eigen, null_dimension

UPSTREAM = ("absolute", 0.02)  # jianghoucheng/AlphaEdit hparams: nullspace_threshold 2e-2 for every model


def spectrum(lm, layers=None, rule: str | None = None, threshold: float | None = None,
             overrides: dict | None = None) -> dict:
    """The spectrum of C at `layers` (default: AlphaEdit's edited layers for this model) with the null space that
    `rule` and `threshold` (default: the model's AlphaEdit hyperparameters) select."""
    changes = dict(overrides or {})
    if rule is not None:
        changes["nullspace_rule"] = rule
    if threshold is not None:
        changes["nullspace_threshold"] = threshold
    if layers is not None:
        changes["layers"] = sorted(set(int(l) for l in layers))
    hp = load_hparams("alphaedit", lm, changes)  # validates the rule, threshold and layers
    out = []
    for layer in hp.layers:
        e, _ = eigen(lm, layer, hp.mom2_n_tokens)
        e = e.clamp_min(0)  # C is PSD; rounding leaves tiny negative eigenvalues
        k = null_dimension(e, hp.nullspace_rule, hp.nullspace_threshold)
        k_up = null_dimension(e, *UPSTREAM)
        total = float(e.sum())
        out.append({"layer": layer, "width": int(e.numel()), "eigenvalues": e.flip(0).tolist(),
                    "null_dimension": k, "cut": float(e[k - 1]) if k else None,
                    "null_energy": float(e[:k].sum()) / total if k and total else 0.0,
                    "largest": float(e[-1]), "mean": total / e.numel(),
                    "upstream_null_dimension": k_up,
                    "upstream_null_energy": float(e[:k_up].sum()) / total if k_up and total else 0.0})
    return {"model": lm.name, "rule": hp.nullspace_rule, "threshold": hp.nullspace_threshold,
            "rule_meaning": NULL_RULES[hp.nullspace_rule], "projection": hp.projection,
            "statistics_tokens": hp.mom2_n_tokens,
            "upstream": {"rule": UPSTREAM[0], "threshold": UPSTREAM[1], "meaning": NULL_RULES[UPSTREAM[0]]},
            "layers": out}


def spectrum_figure(spec: dict):
    """Plotly figure: eigenvalues (largest first, log scale) per layer, the null-space cut as a dashed line."""
    import plotly.graph_objects as go

    palette = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]
    fig = go.Figure()
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
    fig.update_layout(height=420, margin={"t": 40},
                      title=f"{spec['model']}: null space = {spec['rule_meaning'].split(':')[0]} "
                            f"(threshold {spec['threshold']:g}); shaded: where AlphaEdit may write",
                      legend={"font": {"size": 10}})
    return fig
