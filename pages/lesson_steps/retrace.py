"""Step 6: where does the new fact live now? The edited model traced again, with the new target as the answer.
"""
from __future__ import annotations

import streamlit as st

from editkit.core.progress import part
from editkit.figures import lesson as figs
from editkit.lesson import compute, grading
from editkit.lesson import pack as packs
from pages.lesson_steps import keys
from pages.lesson_steps.asking import ask, explain, own_request, try_own
from pages.lesson_steps.cells import grade_pick, pick_cell, picked_cell
from pages.lesson_steps.shared import chart, fast_caption, needs, settings
from pages.lesson_steps.step import Step


def draw(pack, fid: str, fact: dict, t: int | None = 0) -> None:
    t = t or 0  # the new target picked above the step
    edit = needs(pack, fid, packs.edit_name(t, "rome"), "ROME edit to this target")
    trace = needs(pack, fid, packs.retrace_name(t, "rome"), "re-trace of the edited model")
    if edit is None or trace is None:
        return
    title = f"Click the state you think carries {trace['answer']!r} now"
    grid, widgets, inputs = pick_cell(fid, 6, trace, title)
    ask(pack, fid, 6, f"The edited model says {trace['answer']!r} (p = {trace['high_score']:.3f}). "
                      f"Traced again with {trace['answer']!r} as the answer: which state, before the "
                      "last token, carries the new fact now? ROME edited layer "
                      f"{', '.join(map(str, edit['layers']))}.",
        widgets, grade_pick(trace), lambda done: show_retrace(pack, fid, t, trace, done), target=t,
        above=grid, inputs=inputs)
    explain(
        "The edited model traced again, with the new target o* as the answer. A restored state brings P(o*) "
        "back when the new association is in it or computed from it: the clean state of the subject's last "
        "token reaches the edited MLP, which now writes v*, and later layers carry it to the last token. "
        "Compare with step 2, where the same trace found the old fact.",
        [r"\mathrm{IE}^{*}(h_i^{(l)}) = P^{\text{edited}}_{*}\big(o^* \mid \text{clean } h_i^{(l)}\big) "
         r"- P^{\text{edited}}_{*}(o^*)"], ["rome"])
    try_own(6, "edit your own fact and trace the edited model", lambda: own_request(6, fact),
            lambda lm, progress, rec: own_retrace(lm, progress, rec, settings(pack)),
            lambda r: st.plotly_chart(figs.retrace_figure(r["trace"], "ROME", r["layers"]), width="stretch",
                                      key=keys.chart("own_fig_6")))


def show_retrace(pack, fid: str, t: int, trace: dict, done: dict) -> None:
    """The ROME-edited model's trace with the student's pick, the other methods' beside it (three to a row),
    and where each method's new fact is carried most."""
    pick = picked_cell(done)
    chart(st, lambda: figs.trace_with_marks(trace, pick, grading.sites(trace)["early"]), "fig_retrace", trace,
          pick)
    fast_caption(trace)
    first = (pack.part(fid, "trace") or {}).get("traces", {}).get("hidden", {}).get("samples")
    if first and trace.get("samples", first) < first:
        st.caption(f"Re-traced with {trace['samples']} noise samples, the first {trace['samples']} of the "
                   f"{first} in step 2's trace: a noisier map, which on the shipped facts finds the early "
                   "site of a much longer trace about as often as a re-trace of 10 samples does (the "
                   "manual's Speed page).")
    others = [(m, pack.part(fid, packs.retrace_name(t, m)), pack.part(fid, packs.edit_name(t, m)))
              for m in pack.manifest.get("method_names", []) if m != "rome"]
    others = [o for o in others if o[1] and o[2]]
    if others:
        st.markdown("The same trace after the other methods' edits (their edited layers dotted):")
        for row in range(0, len(others), 3):
            for col, (m, r, e) in zip(st.columns(3), others[row:row + 3]):
                chart(col, lambda r=r, e=e: figs.retrace_figure(r, e["label"], e["layers"]),
                      f"fig_retrace_{m}", r)
    edit = pack.part(fid, packs.edit_name(t, "rome"))
    st.markdown(grading.retrace_conclusion({edit["label"]: trace, **{e["label"]: r for _, r, e in others}}))


def own_retrace(lm, progress, record, s) -> dict:
    edit, delta = compute.edit(lm, "rome", record, s, part(progress, 0, 0.6, "edit: "))
    small = compute.Settings(**{**s.to_dict(), "retrace_samples": min(s.retrace_samples or s.samples, 5)})
    return {"trace": compute.retrace(lm, record, delta, small, part(progress, 0.6, 1, "trace: ")),
            "layers": edit["layers"]}


STEP = Step(6, "Where does the new fact live now?", draw)
