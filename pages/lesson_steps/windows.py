"""Step 3: MLP or attention? Windows of restored module outputs, and severing the later MLPs or attention."""
from __future__ import annotations

import streamlit as st

from editkit.figures import lesson as figs
from editkit.lesson import compute, grading
from pages.lesson_steps import keys
from pages.lesson_steps.asking import ask, chosen, explain, try_own
from pages.lesson_steps.cells import trace_inputs
from pages.lesson_steps.shared import chart, fast_caption, needs
from pages.lesson_steps.step import Step


def draw(pack, fid: str, fact: dict, target: int | None = None) -> None:
    tr = needs(pack, fid, "trace", "causal trace")
    if tr is None:
        return
    sev = tr.get("severing")
    if sev is None:
        st.info("This pack has no severing result for this fact.")
        return
    q = keys.question(3, fid)
    ask(pack, fid, 3, f"Restore the hidden state at the subject token {sev['token_str']!r} (where "
                      "the hidden-state trace peaks), but freeze the MLPs (or the attention) at that "
                      "token in all later layers in their corrupted state. Do the later MLPs do the "
                      "work?",
        lambda: st.radio("Answer", range(3), format_func=lambda i: grading.SEVER_CHOICES[i], index=None,
                         key=q),
        lambda c: grading.grade_severing(sev, chosen(c)),
        lambda done: show_windows(tr, sev, said=done["grade"] is not None), inputs=[q])
    explain(
        "Restoring a window of 10 MLP (or attention) outputs at one token, the layers [l − 5, l + 5), shows "
        "which module carries the effect: ROME finds the MLPs at the last subject token in middle layers and "
        "attention at the last token in late layers. Severing restores the hidden state at a subject token "
        "(ROME: the last one; here the one where this trace peaks) while the later MLPs (or attention) at "
        "that token stay corrupted: when the effect collapses with the MLPs frozen, the MLPs did the recall. "
        "On a small model a window of 10 covers many of its layers.",
        [r"\text{MLP window at } l:\ m_i^{(j)} \leftarrow m_{i,\text{clean}}^{(j)},\ "
         r"\max(0, l-5) \le j < \min(L, l+5)"], ["tracing"])
    try_own(3, "MLP and attention windows and severing on your prompt", lambda: trace_inputs(3, fact, pack),
            lambda lm, progress, v: compute.traces(lm, v[0], v[1], None, v[2], kinds=("mlp", "attn"),
                                                   progress=progress),
            show_windows_own, samples=lambda v: v[2].samples)


def show_windows(tr: dict, sev: dict, said: bool = False) -> None:
    """The MLP and attention windows and the severing curves, with their conclusion unless the feedback above
    already `said` it (a graded answer's feedback is that sentence)."""
    cols = st.columns(2)
    for col, kind in zip(cols, ("mlp", "attn")):
        chart(col, lambda kind=kind: figs.trace_with_marks(tr["traces"][kind]), f"fig_{kind}",
              tr["traces"][kind])
    chart(st, lambda: figs.severing_figure(sev), "fig_sever", sev)
    fast_caption(tr["traces"]["mlp"])
    if not said:
        st.markdown(grading.severing_conclusion(sev))


def show_windows_own(r: dict) -> None:
    cols = st.columns(2)
    for col, kind in zip(cols, ("mlp", "attn")):
        col.plotly_chart(figs.trace_with_marks(r["traces"][kind]), width="stretch",
                         key=keys.chart(f"own_fig_{kind}"))
    if r.get("severing"):
        st.plotly_chart(figs.severing_figure(r["severing"]), width="stretch", key=keys.chart("own_fig_sever"))
    fast_caption(r["traces"]["mlp"])


STEP = Step(3, "MLP or attention? Windows and severing", draw)
