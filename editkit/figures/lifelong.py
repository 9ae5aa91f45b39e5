"""Plotly figures of lifelong-editing runs (data: evaluation/sequential.py's runs, labelled by
evaluation/lifelong.styled): one panel per metric, one curve per method in its registry colour; hollow markers
are checkpoints measured on a sample of the edits so far."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .labels import param_order, short_param
from .theme import TITLE_FONT, legend_below, subplots

if TYPE_CHECKING:
    import plotly.graph_objects as go

# metric -> (label, scale for display, y-axis title)
METRICS = {
    "efficacy": ("Efficacy", 100, "% of edits"),
    "generalization": ("Generalization", 100, "% of paraphrases"),
    "specificity": ("Specificity", 100, "% of neighborhood prompts"),
    "kept": ("Neighbours kept vs original", 100, "% of neighborhood prompts"),
    "locality": ("Locality vs original (tokens)", 100, "% of neighborhood tokens"),
    "retention": ("Retention", 100, "% of earlier edits kept"),
    "fluency": ("Fluency", 100, "n-gram entropy x100"),
    "perplexity_ratio": ("Perplexity / base", 1, "ratio"),
    "total_relative_norm": ("||ΔW|| / ||W||", 1, "all edited matrices"),
    "took": ("Edit took", 100, "% of the batch's own edits"),
}


def curves(results: dict) -> dict:
    """method -> metric -> {"x": edits, "y": values (display scale), "sampled": [bool]}."""
    out = {}
    for method, res in results.items():
        rows = res.get("rows", [])
        out[method] = {}
        for key, (_, scale, _) in METRICS.items():
            pts = [(r["edit"], r.get(key), r.get("sampled", False)) for r in rows if r.get(key) is not None]
            out[method][key] = {"x": [p[0] for p in pts], "y": [p[1] * scale for p in pts],
                                "sampled": [p[2] for p in pts]}
    return out


def layer_curves(results: dict) -> dict:
    """Per edited matrix (parameter name, in layer order) and method: {"x": edits, "relative_norm": ||dW|| / ||W||,
    "condition": cond(W + dW) (None at checkpoints recorded before runs kept it)}."""
    out: dict = {}
    for method, res in results.items():
        for r in res.get("rows", []):
            rel, cond = r.get("relative_norm") or {}, r.get("condition") or {}
            for name in rel:
                s = out.setdefault(name, {}).setdefault(method, {"x": [], "relative_norm": [], "condition": []})
                s["x"].append(r["edit"])
                s["relative_norm"].append(rel[name])
                s["condition"].append(cond.get(name))
    return dict(sorted(out.items(), key=lambda kv: param_order(kv[0])))


PANELS = ("efficacy", "generalization", "specificity", "retention", "fluency", "perplexity_ratio",
          "total_relative_norm")
# ratios that grow by orders of magnitude once a method collapses (perplexity 10^5 x the base, ||dW|| 100 x ||W||):
# on a linear axis one collapsed curve would flatten every other method's
LOG_PANELS = frozenset({"perplexity_ratio", "total_relative_norm"})


# colours of runs of no registered method (styled() gives a variant such as "memit+nas" its method's colour)
VARIANT_COLORS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
# a run drawn in a colour an earlier run has (a method with a stabiliser: its method's colour) gets the next dash
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def _styles(results: dict) -> dict[str, tuple[str, str, str]]:
    """key -> (label, colour, dash): the label and colour the run names (evaluation/lifelong.styled fills in its
    method's), else the key and a colour of its own; runs of one colour (a method and its stabilised variants) are
    told apart by dash, in run order, so that a variant reads as its method's family."""
    out, seen = {}, {}
    for k, (key, res) in enumerate(results.items()):
        color = res.get("color") or VARIANT_COLORS[k % len(VARIANT_COLORS)]
        out[key] = (res.get("label", key), color, DASHES[seen.get(color, 0) % len(DASHES)])
        seen[color] = seen.get(color, 0) + 1
    return out


def lifelong_figure(results: dict, panels=PANELS, columns: int = 4) -> go.Figure:
    import plotly.graph_objects as go

    data = curves(results)
    styles = _styles(results)
    rows = (len(panels) + columns - 1) // columns
    fig = subplots(rows=rows, cols=columns, subplot_titles=[METRICS[p][0] for p in panels],
                   horizontal_spacing=0.06, vertical_spacing=0.14)
    for method, series in data.items():
        label, color, dash = styles[method]
        for i, panel in enumerate(panels):
            s = series[panel]
            if not s["x"]:
                continue
            symbols = ["circle-open" if sampled else "circle" for sampled in s["sampled"]]
            fig.add_trace(go.Scatter(x=s["x"], y=s["y"], mode="lines+markers", name=label, legendgroup=method,
                                     showlegend=i == 0, line={"color": color, "dash": dash},
                                     marker={"symbol": symbols, "size": 6, "color": color}),
                          row=i // columns + 1, col=i % columns + 1)
    for i, panel in enumerate(panels):
        fig.update_xaxes(title_text="edits" if i // columns == rows - 1 else None, row=i // columns + 1,
                         col=i % columns + 1)
        log = panel in LOG_PANELS  # on a log axis one label per power of ten (plotly's 2 and 5 between read as data)
        fig.update_yaxes(title_text=METRICS[panel][2], title_font={"size": 11}, row=i // columns + 1,
                         col=i % columns + 1, type="log" if log else "linear", **({"dtick": 1} if log else {}))
    fig.update_layout(height=300 * rows + 60, margin={"t": 70, "b": 20},
                      title={"text": "Lifelong editing: all edits so far, after each checkpoint",
                             "font": {"size": TITLE_FONT}})
    legend_below(fig)
    return fig


def _layer_titles(names: list[str]) -> tuple[list[str], str | None]:
    """The panels' titles: "layer 12" when every matrix is the same module (named once, in the figure's title; ten
    "L12 down_proj" titles ran into each other), else each matrix's short name."""
    short = [short_param(n) for n in names]
    modules = {t.split(" ", 1)[1] for t in short if " " in t}
    if len(modules) == 1 and all(" " in t for t in short):
        return [f"layer {t.split(' ', 1)[0][1:]}" for t in short], modules.pop()
    return short, None


def layer_figure(results: dict, columns: int | None = None) -> go.Figure:
    """One column per edited matrix (layer): ||dW|| / ||W|| on top and the condition number cond(W + dW) below
    (PRUNE's quantity; log axes), one curve per method after each checkpoint. Runs recorded before the condition
    number was kept leave the lower panels empty."""
    import plotly.graph_objects as go

    data = layer_curves(results)
    styles = _styles(results)
    names = list(data) or ["(no edited matrices)"]
    cols = columns or max(1, len(names))
    titles, module = _layer_titles(names[:cols])
    fig = subplots(rows=2, cols=cols, horizontal_spacing=0.04, vertical_spacing=0.12, subplot_titles=titles)
    for a in fig.layout.annotations:
        a.font.size = TITLE_FONT
    shown = set()
    for c, name in enumerate(names[:cols]):
        for method, s in data.get(name, {}).items():
            label, color, dash = styles[method]
            for row, key in ((1, "relative_norm"), (2, "condition")):
                pts = [(x, y) for x, y in zip(s["x"], s[key]) if y is not None]
                if not pts:
                    continue
                fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines+markers",
                                         name=label, legendgroup=method, showlegend=method not in shown,
                                         line={"color": color, "dash": dash}, marker={"size": 5, "color": color}),
                              row=row, col=c + 1)
                shown.add(method)
        for row, what in ((1, "||ΔW|| / ||W||"), (2, "cond(W + ΔW)")):
            fig.update_yaxes(type="log", dtick=1, row=row, col=c + 1, title_text=what if c == 0 else None)
            fig.update_xaxes(title_text="edits" if row == 2 else None, row=row, col=c + 1)
    fig.update_layout(height=620, margin={"t": 70, "b": 20},
                      title={"text": f"Per edited matrix{f' ({module}, by layer)' if module else ''}: update norm and "
                                     "condition number after each checkpoint", "font": {"size": TITLE_FONT}})
    legend_below(fig)
    return fig
