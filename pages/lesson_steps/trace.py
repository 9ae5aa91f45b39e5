"""Step 2: causal tracing. Which hidden state, restored into a corrupted run, brings the answer back?"""
from __future__ import annotations

import streamlit as st

from editkit.core.progress import part
from editkit.figures import lesson as figs
from editkit.figures.tracing import depth_comparison
from editkit.lesson import compute, grading
from pages import ui
from pages.lesson_steps import keys
from pages.lesson_steps.asking import ask, explain, try_own
from pages.lesson_steps.cells import grade_pick, pick_cell, picked_cell, trace_inputs
from pages.lesson_steps.shared import chart, fast_caption, needs
from pages.lesson_steps.step import Step


def draw(pack, fid: str, fact: dict, target: int | None = None) -> None:
    tr = needs(pack, fid, "trace", "causal trace")
    if tr is None:
        return
    hidden = tr["traces"]["hidden"]
    grid, widgets, inputs = pick_cell(fid, 2, hidden, "Click the state you think carries the fact")
    ask(pack, fid, 2, f"Noise on the subject's embeddings lowers p({hidden['answer']!r}) from "
                      f"{hidden['high_score']:.3f} to {hidden['low_score']:.3f}. Restoring one clean "
                      "hidden state brings it back: which state, before the last token, brings back "
                      "the most? Click a cell or pick a token and a layer.",
        widgets, grade_pick(hidden), lambda done: show_hidden(hidden, done), above=grid, inputs=inputs)
    explain(
        "Causal tracing (Meng et al. 2022): a clean run predicts the answer o; a corrupted run adds Gaussian "
        "noise (3 times the standard deviation of the embeddings) to the subject's token embeddings, so the "
        "model loses o; a restored run copies one clean hidden state h_i^(l) (token i after layer l) into "
        "the corrupted run. Each cell's colour is the restored probability, averaged over the noise samples. "
        "On GPT-2 XL, ROME found two sites: the last subject token in early-to-middle layers, where the fact "
        "is recalled, and the last token in late layers, where it is read out (the result says how this fact "
        "compares).",
        [r"\mathrm{IE}(h_i^{(l)}) = P_{*}\big(o \mid \text{clean } h_i^{(l)}\big) - P_{*}(o)"], ["tracing"])
    try_own(2, "the hidden-state trace of your prompt, on one model or two",
            lambda: trace_inputs(2, fact, pack, True), own_traces, show_own_traces,
            samples=lambda v: v[2].samples * (1 + (v[3] is not None)))


def own_traces(lm, progress, v) -> dict:
    """The hidden-state trace of the student's prompt on the lesson's model and, when picked, on a second one
    ("both": model name -> trace, for the relative-depth view)."""
    prompt, subject, s, other = v
    lms = [lm] + ([other] if other is not None else [])
    runs = [compute.traces(m, prompt, subject, None, s, kinds=("hidden",), sever=False,
                           progress=part(progress, i / len(lms), (i + 1) / len(lms), f"{m.name}: "))
            for i, m in enumerate(lms)]
    return {**runs[0], "both": {m.name: r["traces"]["hidden"] for m, r in zip(lms, runs)} if other else None}


def show_own_traces(r: dict) -> None:
    """The student's trace, its marks and what it says (clean and corrupted p, the peak: the pack's trace ends
    with the same; a bare heatmap ended 86 s of waiting), and with a second model both on a relative depth
    axis."""
    hidden = r["traces"]["hidden"]
    s = grading.sites(hidden)
    st.plotly_chart(figs.trace_with_marks(hidden, None, s["early"]), width="stretch",
                    key=keys.chart("own_fig_2"))
    fast_caption(hidden)
    for name, trace in (r.get("both") or {None: hidden}).items():  # each model's, with two
        who = f"**{ui.md_escape(name)}**: " if name else ""
        st.markdown(who + ui.md_escape(grading.trace_summary(trace)))
    if r.get("both"):
        st.markdown("The same fact on both models, each layer at its **relative depth** l / (L − 1): where "
                    "does restoring the last subject token's state bring back the most of p(answer), "
                    "(p − p\\*) / (p_clean − p\\*)?")
        st.plotly_chart(depth_comparison(r["both"]), width="stretch", key=keys.chart("own_depth_2"))


def show_hidden(hidden: dict, done: dict) -> None:
    s = grading.sites(hidden)
    pick = picked_cell(done)
    chart(st, lambda: figs.trace_with_marks(hidden, pick, s["early"]), "fig_hidden", hidden, pick)
    fast_caption(hidden)
    _, layer = s["late"]
    st.markdown(grading.early_site_note(hidden))
    st.caption(f"★ the strongest state before the last token; the last token's own state recovers up to "
               f"{s['late_p']:.3f} at layer {layer} (the late site). `*` marks the subject's tokens.")


STEP = Step(2, "Causal tracing: which state carries the fact?", draw)
