"""Ripple figures: what one edit moved of the facts it should move and keep (a grid a student reads at a glance),
and the share table over many edits. Data in (the JSON of evaluation/ripple.py and ripple_eval.py, or anything
with the same keys), figure out."""
from __future__ import annotations

import plotly.graph_objects as go

from .theme import TOOLBAR_HEIGHT, figure, text_width, wrap

VERDICT = {"moved": 1.0, "stayed": 1.0, "failed": 0.0}
GOOD, BAD, BEFORE = "#1b9e77", "#d95f02", "#e8e8e8"
COLUMN_PX, TICK, ROW_TICK, TITLE = 70, 12, 11, 13  # a method's column label is wrapped to COLUMN_PX at TICK px
COLUMNS = [("logical", "logical / compositional"), ("aliasing", "aliasing"), ("specificity", "rel. specificity"),
           ("preservation", "preservation"), ("efficacy", "efficacy"), ("neighbourhood", "neighb. specificity"),
           ("neighbourhood_change", "neighb. spec. change")]
SHORT = {"logical": "logical", "aliasing": "alias", "specificity": "specificity", "preservation": "preserve",
         "user": "yours"}


def _get(x, key, default=None):
    return x.get(key, default) if isinstance(x, dict) else getattr(x, key, default)


def _row_label(f) -> str:
    arrow = "→" if _get(f, "move") else "="
    prompt = _get(f, "prompt")
    prompt = prompt if len(prompt) <= 48 else "…" + prompt[-47:]
    return f"{SHORT.get(_get(f, 'criterion'), _get(f, 'criterion'))} · {prompt} {arrow} {_get(f, 'answer').strip()}"


def ripple_figure(out) -> go.Figure | None:
    """One row per implied fact (grouped by criterion; → should move to the answer, = should stay on it), one
    column for the model before the edit and one per method: the cell shows P(expected answer), green where the
    fact moved / stayed as it should, orange where it failed. None when there is no fact (say the message)."""
    facts = _get(out, "facts") or []
    methods = _get(out, "methods") or {}
    if not facts:
        return None
    labels = [_row_label(f) for f in facts]
    # one column per method, seven or more on Edit & compare: labels too wide for their column were turned by
    # plotly into the title above them, so each is wrapped onto lines that fit and drawn level
    cols = [wrap(c, COLUMN_PX, TICK) for c in ["before"] + [_get(m, "label") for m in methods.values()]]
    z, text = [], []
    for i, f in enumerate(facts):
        row_z = [0.5]
        row_t = [f"{_get(f, 'p_before') or 0:.2f}"]
        for m in methods.values():
            o = _get(m, "outcomes")[i]
            row_z.append(VERDICT[_get(o, "verdict")])
            row_t.append(f"{_get(o, 'p_after'):.2f} {'✓' if _get(o, 'verdict') != 'failed' else '✗'}")
        z.append(row_z)
        text.append(row_t)
    fig = figure(go.Heatmap(
        z=z, x=cols, y=labels, text=text, texttemplate="%{text}", zmin=0, zmax=1, showscale=False, xgap=3, ygap=3,
        colorscale=[[0.0, BAD], [0.49, BAD], [0.5, BEFORE], [0.51, GOOD], [1.0, GOOD]],
        hovertemplate="%{y}<br>%{x}: P(expected) %{text}<extra></extra>"))
    fig.update_yaxes(autorange="reversed", tickfont={"size": ROW_TICK})
    fig.update_xaxes(side="top", tickangle=0, tickfont={"size": TICK})
    lines = max(c.count("<br>") + 1 for c in cols)
    # the toolbar's band, the title, a gap, the column labels
    top = TOOLBAR_HEIGHT + 2 + round(TITLE * 1.25) + 10 + round(lines * TICK * 1.25) + 8
    left = round(max(text_width(l, ROW_TICK) for l in labels)) + 12
    fig.update_layout(height=top + 20 + 34 * len(facts), margin={"l": left, "r": 10, "t": top, "b": 10},
                      title={"text": "P(expected answer) before and after each edit: ✓ green = moved / stayed as it "
                                     "should, ✗ orange = failed (→ should move, = should stay)",
                             "font": {"size": TITLE}, "y": 1, "yref": "container", "yanchor": "top",
                             "pad": {"t": TOOLBAR_HEIGHT + 2}})
    return fig


def share_figure(out) -> go.Figure:
    """The evaluation's share of implied facts that moved / stayed as they should, per criterion (groups) and
    method (bars), with 95% intervals over edits."""
    table = _get(out, "table")
    fig = figure()
    crits = [(c, label) for c, label in COLUMNS[:4]]
    for m, cells in table.items():
        fig.add_trace(go.Bar(name=m, x=[label for _, label in crits],
                             y=[(cells.get(c) or {}).get("mean") for c, _ in crits],
                             error_y={"type": "data", "array": [(cells.get(c) or {}).get("ci95") or 0
                                                                for c, _ in crits]}))
    fig.update_layout(barmode="group", yaxis_title="% of implied facts as they should be", yaxis_range=[0, 105],
                      height=420, title=f"Ripple effects on {_get(out, 'model')}, {_get(out, 'n')} edits")
    return fig
