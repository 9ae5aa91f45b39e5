"""Step 5: edit the fact with ROME. How likely is the new target after the edit?"""
from __future__ import annotations

import streamlit as st

from editkit.figures import lesson as figs
from editkit.lesson import compute, grading
from editkit.lesson import pack as packs
from pages import ui
from pages.lesson_steps import keys
from pages.lesson_steps.asking import ask, chosen, explain, own_request, try_own
from pages.lesson_steps.shared import chart, needs, settings
from pages.lesson_steps.step import Step


def draw(pack, fid: str, fact: dict, t: int | None = 0) -> None:
    t = t or 0  # the new target picked above the step
    edit = needs(pack, fid, packs.edit_name(t, "rome"), "ROME edit to this target")
    if edit is None:
        return
    pre = edit["probabilities"]["pre"]["rewrite"][0]
    q = keys.question(5, fid, t)
    ask(pack, fid, 5, f"ROME rewrites one MLP so that {fact['request']['subject']!r} now recalls "
                      f"{edit['target_new'].strip()!r}. Today P({edit['target_new']!r}) = "
                      f"{pre['p_new']:.3f} after the prompt. After the edit it will be:",
        lambda: st.radio("Answer", range(len(grading.BINS)), format_func=lambda i: grading.BINS[i][2],
                         index=None, horizontal=True, key=q),
        lambda c: grading.grade_edit(edit, chosen(c)), lambda done: show_edit({"rome": edit}), target=t,
        inputs=[q])
    explain(
        "ROME (Meng et al. 2022) treats the edited MLP's output matrix W as a linear associative memory: the "
        "key k* (the MLP activation at the subject's last token, averaged over random prefixes) should give "
        "a new value v* (optimised so that the model predicts the new object, with a KL term keeping "
        "“{subject} is a” unchanged). Of all matrices with Ŵk* = v* it takes the one that changes W least "
        "on the keys it already stores (their second moment C): a rank-one update, here of layer "
        f"{', '.join(map(str, edit['layers']))}.",
        [r"\hat W = W + \Lambda\,(C^{-1} k_*)^{\top},\qquad \Lambda = \frac{v_* - W k_*}{(C^{-1} "
         r"k_*)^{\top} k_*}"],
        ["rome"])
    try_own(5, "a ROME edit of your own fact", lambda: own_request(5, fact),
            lambda lm, progress, rec: {"rome": compute.edit(lm, "rome", rec, settings(pack), progress)[0]},
            lambda r: show_edit(r, "own"))


def show_edit(edits: dict, key: str = "pack") -> None:
    """Each group's probabilities before and after (rewrite, paraphrase, neighbourhood) and each method's
    greedy continuation before and after."""
    st.caption(figs.BARS_KEY)
    cols = st.columns(3)
    first = next(iter(edits.values()))
    for col, group in zip(cols, ("rewrite", "paraphrase", "neighborhood")):
        if not first["probabilities"]["pre"][group]:
            col.caption(f"no {group} prompts")
            continue
        chart(col, lambda group=group: figs.edits_figure(edits, group), f"edit_{group}_{key}",
              first if key == "pack" else None, group, *edits)
        col.caption(figs.edit_prompts(edits, group))
    for e in edits.values():
        g = e["greedy"]
        before, after = g["pre"]["rewrite"][0], g["post"]["rewrite"][0]
        st.markdown(f"**{e['label']}**, greedy continuation of “{ui.md_escape(e['rewrite'])}”  \n"
                    f"before: …{ui.continuation(before)}  \nafter: …{ui.continuation(after)}")
        note = figs.special_token_note(before, after)
        if note:
            st.caption(ui.md_escape(note))


STEP = Step(5, "Edit the fact with ROME", draw)
