"""Step 8: the methods side by side. Which edited models *say* the new target when they continue the prompt?
"""
from __future__ import annotations

import pandas as pd
import streamlit as st

from editkit.core.progress import part
from editkit.figures import lesson as figs
from editkit.lesson import compute, grading
from editkit.lesson import pack as packs
from pages import ui
from pages.lesson_steps import keys
from pages.lesson_steps.asking import ask, explain, own_request, try_own
from pages.lesson_steps.edit import show_edit
from pages.lesson_steps.shared import needs, settings
from pages.lesson_steps.step import Step

FORMULAS = [
    r"\text{MEMIT: } \Delta = R K^{\top}(\lambda C + K K^{\top})^{-1},\quad R^{l} = \frac{V - "
    r"W_0^{l}K^{l}}{L - l + 1}\qquad \text{PMET: } R^{l} = \frac{V - W_0^{l}K^{l}}{\sqrt{L - l + 1}}",
    r"\text{AlphaEdit: } \Delta = R K_1^{\top} P\,(K_p K_p^{\top} P + K_1 K_1^{\top} P + \alpha I)^{-1}",
    r"\text{UltraEdit: } \Delta = (\hat K^{\top}\hat K + \lambda I)^{-1}\hat K^{\top} V,\quad "
    r"V = -\eta\,\lVert \hat k\rVert^2\,\hat g",
    r"\text{efficacy} = \mathbb{1}\big[P(o_*) > P(o_c)\big],\quad \text{generation success} = "
    r"\mathbb{1}\big[o_* \in \mathrm{greedy}(x) \wedge o_c \notin \mathrm{greedy}(x)\big]"]


def draw(pack, fid: str, fact: dict, t: int | None = 0) -> None:
    t = t or 0  # the new target picked above the step
    edits = {m: pack.part(fid, packs.edit_name(t, m)) for m in pack.manifest.get("method_names", [])}
    edits = {m: e for m, e in edits.items() if e}
    if not edits:
        needs(pack, fid, packs.edit_name(t, "rome"), "edits to this target")
        return
    labels = {m: e["label"] for m, e in edits.items()}
    new = next(iter(edits.values()))["target_new"]
    q = keys.question(8, fid, t)
    ask(pack, fid, 8, f"Each method edits the same fact to {new.strip()!r} on the same weights. Asked "
                      "to continue the prompt (greedy decoding), which edited models will *say* "
                      f"{new.strip()!r}?",
        lambda: st.multiselect("They will say it", list(edits), format_func=labels.get, key=q),
        lambda chosen: grading.grade_generation(edits, chosen or []), lambda done: show_methods(edits),
        target=t, inputs=[q])
    methods = compute.methods()  # every registered method, also one added after the pack was built
    st.markdown("\n".join(f"- **{m['label']}**: {ui.md_escape(m['about'])}"
                          + ("" if m["name"] in edits else " *(not in this pack: run it in “try your own”; a "
                             "pack rebuilt with `lesson build` computes it)*") for m in methods))
    explain(
        "MEMIT spreads the change over several layers with a least-squares solve that keeps the other keys' "
        "outputs, layer l taking 1/(L − l + 1) of what is still missing; PMET optimises attention and FFN "
        "targets together, writes only the FFN and spreads with a square root; AlphaEdit projects the update "
        "onto the null space P of the key statistics, so ordinary keys barely move; UltraEdit needs no "
        "statistics and no target optimisation: one ridge solve from the edited layers' keys and gradients, "
        "standardised with running statistics carried from edit to edit. Teacher-forced efficacy "
        "asks whether P(new) > P(true) after the prompt; generation-based success asks whether the greedy "
        "continuation says the new target and no longer the old one (QAEdit: 38.5% real generation success "
        "against 96.8% teacher-forced in their setting).",
        FORMULAS, ["memit", "pmet", "metrics"])
    try_own(8, "every method on your own fact", lambda: own_request(8, fact),
            lambda lm, progress, rec: own_methods(lm, progress, rec, pack), lambda r: show_methods(r, "own"))


def own_methods(lm, progress, record, pack) -> dict:
    names = [m["name"] for m in compute.methods()]  # every registered method
    n = len(names)
    return {m: compute.edit(lm, m, record, settings(pack), part(progress, i / n, (i + 1) / n, f"{m}: "))[0]
            for i, m in enumerate(names)}


def show_methods(edits: dict, key: str = "pack") -> None:
    """The methods side by side: the conclusion, the table (one column per method, so it fits the page), the
    charts and the continuations."""
    st.markdown(grading.methods_conclusion(edits))
    st.dataframe(pd.DataFrame(figs.by_column(figs.methods_table(edits))), hide_index=True, width="stretch")
    show_edit(edits, key)


def heading(pack, fact: dict) -> str | None:
    """The methods the pack was built with (the registry may hold more: the heading listed six methods above a
    table of the pack's four)."""
    labels = [m["label"] for m in pack.manifest.get("methods", [])]
    if not labels:
        return None
    return f"{', '.join(labels[:-1])} and {labels[-1]} side by side" if len(labels) > 1 else \
        f"{labels[0]} on its own"


STEP = Step(8, "The methods side by side", draw, heading)
