"""Figures of the Lesson page, from a pack's results (editkit/lesson/compute.py's dicts). Each reuses the figure of
the expert page that shows the same result, adding only what the lesson needs: the student's pick and the true
answer marked on the chart, an empty grid to click before the trace is revealed. No Streamlit here.
"""
from __future__ import annotations

import re

import plotly.graph_objects as go

from .editing import BARS_KEY, by_column, probability_figure, prompt_list, trace_figure
from .lens import logit_lens_figure
from .lifelong import lifelong_figure
from .memories import contributions_figure
from .side_effects import bleed_figure, layer_sweep_figure
from .theme import WIDTHS, figure, legend_below
from .tracing import heatmap, severing_figure

__all__ = ["BARS_KEY", "by_column", "compact", "lens_figure", "pick_grid", "trace_with_marks", "severing_figure",
           "memories_figure", "edits_figure", "retrace_figure", "bleed_figure", "sweep_figure", "lifelong_figure",
           "methods_table"]


def compact(text: str) -> str:
    """Generated text with a run of one repeated special token written once with its count (an edited model may
    repeat "<start_of_image>" a dozen times): "Rome, Italy<start_of_image> ×17". The text is otherwise as
    generated."""
    return re.sub(r"(<[^<>\s]{1,40}>)(?:\1){2,}", lambda m: f"{m.group(1)} ×{len(m.group(0)) // len(m.group(1))}",
                  text)


def special_token_note(before: str, after: str) -> str | None:
    """A sentence for a continuation that repeats a special token (<...>) the unedited model did not write: shown
    without comment, "<start_of_image> ×17" reads as a display bug."""
    runs = re.findall(r"(<[^<>\s]{1,40}>)(?:\1)+", after)
    new = [t for t in dict.fromkeys(runs) if t not in before]
    if not new:
        return None
    tok = new[0]
    n = max(len(m.group(0)) // len(tok) for m in re.finditer(f"(?:{re.escape(tok)})+", after))
    return (f"After the edit the model writes {tok} {n} times in a row. It is one of the model's special tokens, "
            "not text, and the unedited model does not write it here: the edit pushed the continuation off ordinary "
            "text after the new answer, a side effect the probabilities above do not show.")


def edit_prompts(edits: dict, group: str) -> str:
    """The prompts behind a probability chart's #1, #2, ... (one line for its caption)."""
    return prompt_list(_as_comparison(edits), 0, group)


def token_labels(trace: dict) -> list[str]:
    """The heatmaps' row labels: index, token, * on subject tokens (as tracing/figures.py draws them)."""
    b, e = trace["subject_range"]
    return [f"{i}: {t!r}{'*' if b <= i < e else ''}" for i, t in enumerate(trace["tokens"])]


def lens_figure(lens: dict, width: float = WIDTHS["three_quarters"]) -> go.Figure:
    """The Home page's logit lens at the last token, the answer starred and the first layer where it is on top
    outlined (the title says so)."""
    fig = logit_lens_figure(lens, len(lens["layers"][0]), width, lens["answer"], lens.get("first_layer"))
    first = lens.get("first_layer")
    fig.update_layout(title_text=f"Logit lens at {lens['tokens'][-1]!r}: ★ = {lens['answer']!r}"
                      + (f", first on top at L{first} (outlined)" if first is not None else ""))
    return fig


def pick_grid(trace: dict, picked: tuple[int, int] | None = None, title: str = "") -> go.Figure:
    """An empty token x layer grid of the trace's shape, one clickable square per cell (the student picks a cell
    before the trace is shown); the pick is filled."""
    labels = token_labels(trace)
    n_layers = len(trace["scores"][0])
    xs = [l for _ in labels for l in range(n_layers)]
    ys = [lab for lab in labels for _ in range(n_layers)]
    custom = [[t, l] for t in range(len(labels)) for l in range(n_layers)]
    colors = ["#6a3d9a" if picked and (t, l) == tuple(picked) else "#eeeeee" for t, l in custom]
    fig = figure(go.Scatter(x=xs, y=ys, mode="markers", customdata=custom,
                            marker={"symbol": "square", "size": 18, "color": colors,
                                    "line": {"width": 1, "color": "#bbbbbb"}},
                            hovertemplate="token %{y}<br>layer %{x}<extra>click to pick</extra>"))
    fig.update_yaxes(autorange="reversed", type="category", categoryorder="array", categoryarray=labels)
    fig.update_layout(title={"text": title or "Pick a cell: which state carries the fact?", "font": {"size": 13}},
                      xaxis_title="layer", height=140 + 28 * len(labels), margin={"t": 40, "b": 40},
                      xaxis={"dtick": 1, "range": [-0.6, n_layers - 0.4]}, clickmode="event+select",
                      dragmode=False)
    return fig


def trace_with_marks(trace: dict, picked: tuple[int, int] | None = None,
                     truth: tuple[int, int] | None = None) -> go.Figure:
    """The trace heatmap (ROME's colours) with the student's pick (circle) and the true cell (star)."""
    fig = heatmap(trace)
    labels = token_labels(trace)
    for cell, name, symbol, color in ((picked, "your pick", "circle-open", "#ff7f0e"),
                                      (truth, "answer", "star", "#d62728")):
        if cell is not None:
            t, l = cell
            fig.add_trace(go.Scatter(x=[l], y=[labels[t]], mode="markers", name=name, showlegend=True,
                                     marker={"symbol": symbol, "size": 16, "color": color,
                                             "line": {"width": 2, "color": color}},
                                     hovertemplate=f"{name}: %{{y}}, layer %{{x}}<extra></extra>"))
    legend_below(fig)
    return fig


def memories_figure(view: dict) -> go.Figure:
    """The memories by contribution |m_i| ||v_i|| (green m_i > 0, red m_i < 0), as on the FFN memories page."""
    return contributions_figure(view["memories"])


def _as_comparison(edits: dict) -> dict:
    """Edit results (method -> compute.edit dict, one request) in Edit & compare's layout."""
    first = next(iter(edits.values()))
    return {"pre": [{"probabilities": first["probabilities"]["pre"]}],
            "methods": {m: {"label": e["label"], "color": e["color"],
                            "post": [{"probabilities": e["probabilities"]["post"]}]} for m, e in edits.items()}}


def edits_figure(edits: dict, group: str = "rewrite") -> go.Figure | None:
    """P(new) bars and P(true) crosses per prompt of a group, before and after each method's edit."""
    return probability_figure(_as_comparison(edits), 0, group)


def layer_span(layers) -> str:
    """[2, 3, 4, 5, 6] -> "L2–6", [4] -> "L4", [1, 2, 7] -> "L1–2, L7"."""
    runs: list[list[int]] = []
    for l in sorted(layers):
        if runs and l == runs[-1][-1] + 1:
            runs[-1].append(l)
        else:
            runs.append([l])
    return ", ".join(f"L{r[0]}" + (f"–{r[-1]}" if len(r) > 1 else "") for r in runs)


def retrace_figure(trace: dict, title: str, edited_layers=()) -> go.Figure:
    """The edited model's hidden-state trace for the new target, the edited layers dotted and named once, in the
    title (one label per line would pile up where a method edits neighbouring layers)."""
    fig = trace_figure(trace, title)
    for layer in edited_layers:
        fig.add_vline(x=layer, line_color="#d62728", line_dash="dot")
    if edited_layers:
        fig.update_layout(title_text=f"{title}: p({trace['answer']!r}), edited {layer_span(edited_layers)}")
    return fig


def sweep_figure(sweep: dict, mlp_trace: dict | None) -> go.Figure:
    """The layer sweep beside the MLP trace it was compared with (the pack stores that trace once)."""
    if sweep.get("trace") and mlp_trace is not None and "trace" not in sweep["trace"]:
        sweep = {**sweep, "trace": {**sweep["trace"], "trace": mlp_trace}}
    elif sweep.get("trace") and "trace" not in sweep["trace"]:
        sweep = {**sweep, "trace": None}
    return layer_sweep_figure(sweep)


def methods_table(edits: dict) -> list[dict]:
    """One row per method: teacher-forced and generation-based success side by side (x100 for rates)."""
    rows = []
    for e in edits.values():
        m = e["metrics"]
        post = e["probabilities"]["post"]["rewrite"][0]

        def pct(key):
            v = m.get(key)
            return None if v is None else round(100 * v)

        rows.append({"method": e["label"], "P(new) after": round(post["p_new"], 3),
                     "P(true) after": round(post.get("p_true", float("nan")), 3),
                     "efficacy (teacher-forced)": pct("post_efficacy"),
                     "generalization (teacher-forced)": pct("post_generalization"),
                     "specificity (teacher-forced)": pct("post_specificity"),
                     "says it (greedy, prompt)": pct("post_gen_efficacy"),
                     "says it (greedy, paraphrases)": pct("post_gen_generalization"),
                     "‖ΔW‖/‖W‖ (largest)": round(max(e["relative_norm"].values(), default=0), 4),
                     "edited layers": ", ".join(map(str, e.get("layers", []))), "seconds": round(e["seconds"], 1)})
    return rows
