"""Plotly figures and tables of an edit comparison (evaluation/compare.py's `out`), for the pages and notebooks.

No Streamlit here: each function takes JSON results and returns a plotly Figure or a list of table rows.
"""
from __future__ import annotations

import math

import plotly.graph_objects as go

from ..core.results import Result, json_of
from .labels import header, param_order, short_param
from .theme import TITLE_FONT, WIDTHS, figure, legend_below, subplots

METRICS = [("efficacy", "Efficacy"), ("generalization", "Generalization"), ("specificity", "Specificity"),
           ("gen_efficacy", "Generation efficacy"), ("gen_generalization", "Generation generalization"),
           ("score", "Score"), ("efficacy_magnitude", "Efficacy magn."), ("specificity_magnitude", "Specificity magn."),
           ("fluency", "Fluency"), ("consistency", "Consistency"), ("reliability", "Reliability"),
           ("generalization_acc", "Generalization acc.")]
GROUPS = ("rewrite", "paraphrase", "neighborhood")


def _avg(metrics: list[dict], key: str):
    vals = [m[key] for m in metrics if m.get(key) is not None and m[key] == m[key]]
    return round(100 * sum(vals) / len(vals), 1) if vals else None


def metrics_table(out: Result | dict) -> list[dict]:
    """One row before any edit, then one per method: the mean of each metric over the records, x100; each header
    names the metric's family (evaluation/metrics.py: [p] probability comparison, [t] token accuracy, [g] generated
    text; the caption gives labels.legend()). `out`: a Comparison or its JSON."""
    out = json_of(out)
    first = next(iter(out["methods"].values()))
    rows = [{"method": "before edit", **{header(k, label): _avg(first["metrics"], "pre_" + k) for k, label in METRICS},
             "time (s)": None}]
    for r in out["methods"].values():
        rows.append({"method": r["label"],
                     **{header(k, label): _avg(r["metrics"], "post_" + k) for k, label in METRICS},
                     "time (s)": round(r["seconds"], 1)})
    return rows


def by_column(rows: list[dict], key: str = "method") -> list[dict]:
    """A table with one row per option turned so that each option is a column (a measure per row): five methods
    fit the page side by side where a dozen measures as columns ran off its right edge.
    A measure no option has (a run recorded before it was measured) is left out rather than shown as empty cells;
    one option's missing value (not measured, or none: never collapsed) reads "–". Cells are text (a column holds
    numbers and words), numbers as `cell` writes them."""
    measures = [k for k in (rows[0] if rows else []) if k != key and any(r.get(k) is not None for r in rows)]
    return [{"measure": k, **{str(r[key]): cell(r.get(k)) for r in rows}} for k in measures]


def cell(v) -> str:
    """A table cell a reader takes in at a glance and that fits a narrow column: thousands with commas (1,000;
    29,070, never 2.907e+04), one decimal from 10 up (rates x100: 83.5), three significant digits below (0.0948,
    1.01), whole numbers without a point (100, 0), yes / no for flags, "–" for none."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float) and v.is_integer():  # a whole rate reads 100 and 0, as its neighbours' ints do
        return f"{int(v):,}"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"
    return str(v)


def prompt_numbers(rows: list[dict]) -> list[str]:
    """The x labels of a probability chart: "#1", "#2", ... (prompt_list says which prompt each is)."""
    return [f"#{i + 1}" for i in range(len(rows))]


def prompt_list(out: Result | dict, j: int, group: str, width: int = 60) -> str:
    """The prompts behind a probability chart's "#1", "#2", ... in one line, for its caption (`out`: a Comparison
    or its JSON)."""
    out = json_of(out)
    rows = out["pre"][j]["probabilities"][group]
    return " · ".join(f"{n} {_clip(r['prompt'], width)!r}" for n, r in zip(prompt_numbers(rows), rows))


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


BEFORE_CROSS = "#555555"
BARS_KEY = ("Bars: P(new), the new target's probability; crosses ✕: P(true), the old answer's. Each in its "
            "method's colour, dark grey before the edit; each cross stands over its own bar.")


def probability_figure(out: dict, j: int, group: str, width: int = WIDTHS["third"]) -> go.Figure | None:
    """P(new) bars and P(true) crosses for each prompt of `group` of request j, before and after each method: one
    legend entry per method (its bar and its cross), under the chart; the prompts are #1, #2, ... (prompt_list)."""
    rows = out["pre"][j]["probabilities"][group]
    if not rows:
        return None
    x = prompt_numbers(rows)
    fig = figure()
    # the crosses in their bar's colour, the "before" ones a darker grey than its bar (black matched no legend entry)
    series = [("before", "#bbbbbb", BEFORE_CROSS, rows)] + [
        (r["label"], r["color"], r["color"], r["post"][j]["probabilities"][group]) for r in out["methods"].values()]
    for name, bar, cross, probs in series:
        fig.add_trace(go.Bar(x=x, y=[p["p_new"] for p in probs], name=name, marker_color=bar, legendgroup=name,
                             offsetgroup=name, hovertemplate=f"{name}: P(new) %{{y:.3f}}<extra>%{{x}}</extra>"))
        if probs and "p_true" in probs[0]:
            fig.add_trace(go.Scatter(x=x, y=[p["p_true"] for p in probs], name=name, mode="markers",
                                     legendgroup=name, offsetgroup=name, showlegend=False,
                                     # outlined: a cross drawn over its own bar, in its colour, would vanish
                                     marker={"color": cross, "symbol": "x", "size": 11,
                                             "line": {"color": "white", "width": 1.5}},
                                     hovertemplate=f"{name}: P(true) %{{y:.3f}}<extra>%{{x}}</extra>"))
    fig.update_layout(title={"text": f"{group}: bars P(new), ✕ P(true)", "font": {"size": TITLE_FONT}},
                      barmode="group", scattermode="group", yaxis_title="probability", xaxis_title="prompt",
                      height=330,
                      margin={"t": 40, "b": 30, "l": 50, "r": 10})
    fig.update_xaxes(type="category")
    legend_below(fig, width=width)
    return fig


def _spans_decades(values, ratio: float = 20.0) -> bool:
    """Whether positive bars differ by more than `ratio`: the smaller ones would be invisible on a linear axis."""
    return bool(values) and min(values) > 0 and max(values) / min(values) > ratio


def _ticks_125(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks covering [lo, hi] (lo > 0), each labelled in full on a log axis."""
    out = []
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        out += [m * 10.0 ** e for m in (1, 2, 5)]
    inside = [t for t in out if lo / 3 <= t <= hi * 1.5]
    return [float(f"{t:.1g}") for t in inside]


def norms_figure(out: dict) -> go.Figure:
    """||Delta W||_F / ||W||_F of every edited matrix, per method."""
    fig = figure()
    for r in out["methods"].values():
        norms = r["info"]["norms"]
        fig.add_trace(go.Bar(x=[short_param(k) for k in norms], y=[v["relative_norm"] for v in norms.values()],
                             name=r["label"], marker_color=r["color"], hovertext=list(norms),
                             hovertemplate="%{hovertext}: %{y:.4f}<extra></extra>"))
    values = [v["relative_norm"] for r in out["methods"].values() for v in r["info"]["norms"].values()
              if v["relative_norm"] is not None]
    log = _spans_decades(values)  # UltraEdit's changes are ~100x smaller than ROME's: on one linear axis, no bar
    fig.update_layout(barmode="group", yaxis_title="‖ΔW‖_F / ‖W‖_F" + (" (log scale)" if log else ""), height=320,
                      margin={"t": 20, "b": 30})
    if log:
        ticks = _ticks_125(min(values), max(values))  # plotly's own log ticks read "5, 2, 0.01, 5, 2, 0.001"
        # the axis starts 3x below the smallest bar: a log bar is drawn from the axis' bottom, and at it it is a sliver
        fig.update_yaxes(type="log", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks],
                         range=[math.log10(min(values) / 3), math.log10(max(values) * 1.5)])
    names = {k for r in out["methods"].values() for k in r["info"]["norms"]}
    fig.update_xaxes(type="category", categoryorder="array",
                     categoryarray=[short_param(k) for k in sorted(names, key=param_order)])
    legend_below(fig)
    return fig


NOT_APPLICABLE = "–"  # a diagnostics cell that does not apply to the method (DIAGNOSTICS_BLANK says so)
DIAGNOSTICS_BLANK = ("– : does not apply to that method. The division factor is ROME's alone. \"Target reached\" is "
                     "the share of the way to its target vector a multi-layer spread covers at the target site (1: all "
                     "of it; below 0: it moved the other way); ROME writes one layer exactly (W k* = v*), so it has "
                     "none. A method without a target optimisation has no target and no optimisation steps.")


def diagnostics_table(out: dict) -> list[dict]:
    """Per method: time, optimisation steps per request, how far each target was reached, ROME's division factor.
    Every row has every column; a cell that does not apply to a method holds NOT_APPLICABLE (a missing key showed
    as "None" in the page's table), and a column that applies to none of the methods is left out."""
    rows = []
    for r in out["methods"].values():
        info = r["info"]
        reqs = info.get("requests") or []
        reached = info.get("target_reached")
        rows.append({
            "method": r["label"], "time (s)": round(r["seconds"], 2),
            "target reached (per request)": ", ".join(NOT_APPLICABLE if x is None else f"{x:.2f}" for x in reached)
            if reached and any(x is not None for x in reached) else None,
            "ROME division factor": f"{reqs[0]['division_factor']:.4f}" if reqs and "division_factor" in reqs[0]
            else None,
            "optimisation steps": ", ".join(str(len(q.get("losses") or [])) for q in reqs)
            if any(q.get("losses") for q in reqs) else None})
    keep = [k for k in (rows[0] if rows else {}) if any(row[k] is not None for row in rows)]
    return [{k: NOT_APPLICABLE if row[k] is None else row[k] for k in keep} for row in rows]


def loss_figure(out: dict) -> go.Figure:
    """The target optimisation's loss per step, per method and request."""
    fig = figure()
    for r in out["methods"].values():
        for q in r["info"].get("requests", []):
            case = q.get("case_id")
            fig.add_trace(go.Scatter(y=[l["loss"] for l in q["losses"]], line={"color": r["color"]},
                                     name=r["label"] + (f", request {case}" if case not in (None, "") else "")))
    fig.update_layout(xaxis_title="step", yaxis_title="loss", height=300, margin={"t": 20, "b": 30})
    legend_below(fig)
    return fig


def edit_figure(result: dict) -> go.Figure:
    """One edit (EditResult.to_json()): its target optimisation's loss per step, one curve per request, and
    ||dW||_F / ||W||_F of every edited matrix."""
    info = result["info"]
    fig = subplots(rows=1, cols=2, column_widths=[0.55, 0.45],
                   subplot_titles=["target optimisation", "relative weight change"])
    for q in info.get("requests", []):
        if q["losses"]:
            fig.add_trace(go.Scatter(y=[l["loss"] for l in q["losses"]], name=f"request {q.get('case_id')}",
                                     mode="lines"), row=1, col=1)
    norms = info.get("norms", {})
    fig.add_trace(go.Bar(x=[k.replace(".weight", "") for k in norms], y=[v["relative_norm"] for v in norms.values()],
                         name="‖ΔW‖_F / ‖W‖_F", marker_color="#7f7f7f", showlegend=False), row=1, col=2)
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_yaxes(title_text="loss", row=1, col=1)
    fig.update_yaxes(title_text="‖ΔW‖_F / ‖W‖_F", row=1, col=2)
    fig.update_layout(title={"text": f"{result['method']}: {len(result['requests'])} request(s), "
                                     f"{result['seconds']:.1f} s", "font": {"size": 13}},
                      height=360, margin={"t": 60})
    return fig


def before_after_figure(report: dict, j: int = 0) -> go.Figure:
    """Request j of an edit report (EditReport.to_json(), `edit --json`): per prompt group, P(new) as bars and
    P(true) as crosses, before (grey) and after (blue) the edit."""
    r = report["requests"][j]
    groups = [g for g in GROUPS if r["pre"].get(g)]
    fig = subplots(rows=1, cols=len(groups), subplot_titles=groups, shared_yaxes=True)
    for col, group in enumerate(groups, 1):
        pre, post = r["pre"][group], r["post"][group]
        x = [f"#{i + 1}" for i in range(len(pre))]  # categories: a number would be read as a position
        for rows, when, color in ((pre, "before", "#bbbbbb"), (post, "after", "#1f77b4")):
            fig.add_trace(go.Bar(x=x, y=[p["p_new"] for p in rows], name=f"{when}: P(new)", marker_color=color,
                                 legendgroup=when, offsetgroup=when, showlegend=col == 1,
                                 customdata=[p["prompt"] for p in rows],
                                 hovertemplate="%{customdata}<br>P(new) = %{y:.3f}<extra></extra>"), row=1, col=col)
            if rows and "p_true" in rows[0]:
                fig.add_trace(go.Scatter(x=x, y=[p["p_true"] for p in rows], name=f"{when}: P(true)",
                                         mode="markers", marker={"color": "black" if when == "before" else color,
                                                                 "symbol": "x", "size": 11,
                                                                 "line": {"color": "white", "width": 1.5}},
                                         legendgroup=when, offsetgroup=when, showlegend=col == 1), row=1, col=col)
        fig.update_xaxes(title_text="prompt", type="category", row=1, col=col)
    fig.update_yaxes(title_text="probability", row=1, col=1)
    true = f" (was {r['target_true']!r})" if r.get("target_true") else ""
    fig.update_layout(title={"text": f"{report['method']}: {r['rewrite']!r} -> {r['target_new']!r}{true}",
                             "font": {"size": 13}}, barmode="group", scattermode="group", height=360,
                      margin={"t": 60})  # scattermode: each cross over its own bar, not between them
    return fig


def trace_figure(trace: Result | dict, title: str) -> go.Figure:
    """A causal-trace heatmap (a TraceResult or its JSON), tokens down, layers across; * marks subject tokens."""
    trace = json_of(trace)
    b, e = trace["subject_range"]
    labels = [f"{i}: {t!r}{'*' if b <= i < e else ''}" for i, t in enumerate(trace["tokens"])]
    fig = figure(go.Heatmap(z=trace["scores"], y=labels, colorscale="Purples", zmin=trace["low_score"],
                            colorbar={"title": "p"}))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title={"text": f"{title}: p({trace['answer']!r})", "font": {"size": TITLE_FONT}},
                      xaxis_title="layer", height=140 + 26 * len(labels), margin={"t": 40, "b": 40, "r": 10})
    return fig




def evaluation_figure(ev: dict) -> go.Figure:
    """A batch evaluation (Evaluation.to_json()): per method, efficacy, generalization and specificity after the edit
    (x100, 95% bars), beside the unedited model's."""
    rates = ("efficacy", "generalization", "specificity")
    fig = figure()
    first = next(iter(ev["methods"].values()), {})
    rows = [("before edit", {k: first.get(f"pre_{k}") or {} for k in rates})]
    rows += [(m, {k: t.get(f"post_{k}") or {} for k in rates}) for m, t in ev["methods"].items()]
    for name, cells in rows:
        fig.add_trace(go.Bar(x=[header(k, kind=ev.get("metric_family", "counterfact")) for k in rates],
                             y=[cells[k].get("mean") for k in rates], name=name,
                             error_y={"type": "data", "array": [cells[k].get("ci95") or 0 for k in rates]}))
    fig.update_layout(barmode="group", yaxis_title="rate (%)", height=360, margin={"t": 40},
                      title={"text": f"{ev['model']} on {ev['set']}: {ev['n']} records, batch {ev['batch']}",
                             "font": {"size": 13}})
    return fig
