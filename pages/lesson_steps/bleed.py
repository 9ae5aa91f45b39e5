"""Step 7: side effects. Which neighbours (other subjects, same relation) move toward the new target?"""
from __future__ import annotations

import pandas as pd
import streamlit as st

from editkit.figures import lesson as figs
from editkit.lesson import compute, grading
from editkit.lesson import pack as packs
from pages.lesson_steps import keys
from pages.lesson_steps.asking import ask, explain, own_request, try_own
from pages.lesson_steps.shared import chart, needs, settings
from pages.lesson_steps.step import Step


def draw(pack, fid: str, fact: dict, t: int | None = 0) -> None:
    t = t or 0  # the new target picked above the step
    bleed = needs(pack, fid, packs.bleed_name(t), "bleed map for this target")
    if bleed is None:
        return
    rows = grading.neighbours(bleed)
    new = bleed["request"]["target_new"].strip()
    q = keys.question(7, fid, t)
    ask(pack, fid, 7, f"ROME makes {fact['request']['subject']!r} recall {new!r}. Which of these "
                      f"prompts about other subjects will move toward {new!r} (P({new!r}) up by at "
                      f"least {100 * grading.MOVE:.0f} percentage point)?",
        lambda: st.multiselect("They will move", [r["prompt"] for r in rows], key=q),
        lambda chosen: grading.grade_neighbours(bleed, chosen or []), lambda done: show_bleed(bleed),
        target=t, inputs=[q])
    explain(
        "An edit changes W by ΔW, so wherever the layer's input key is k the output changes by exactly ΔW k. "
        "For ROME's rank-one update that change is the edited subject's own change scaled by a share s(k): a "
        "neighbour whose key looks like the subject's to C⁻¹ is pushed toward the new target as hard. "
        "Specificity counts the neighbours (other subjects, same relation) that still prefer their true "
        "answer.",
        [r"\Delta W k = s(k)\,(v_* - W k_*),\qquad s(k) = \frac{(C^{-1}k_*)^\top k}{(C^{-1}k_*)^\top k_*}",
         r"\text{Specificity} = \mathbb{E}_{x \in \text{neighbours}}\,\mathbb{1}\big[P(o_c \mid x) > P(o_* "
         r"\mid x)\big]"],
        ["metrics"])
    try_own(7, "the bleed map of your own edit", lambda: own_request(7, fact, neighbours=True),
            lambda lm, progress, rec: compute.bleed(lm, rec, settings(pack), progress=progress),
            lambda r: show_bleed(r, "own"),
            facts=settings(pack).bleed_facts)


def show_bleed(bleed: dict, key: str = "pack") -> None:
    chart(st, lambda: figs.bleed_figure(bleed), f"bleed_{key}", bleed if key == "pack" else None)
    st.dataframe(pd.DataFrame([{"source": r["source"], "prompt": r["prompt"], "share s": round(r["share"], 3),
                                "at token": r["token"], "P(new) before": round(r["p_new_before"], 4),
                                "P(new) after": round(r["p_new_after"], 4), "moved": grading.moved(r)}
                               for r in bleed["rows"]]), hide_index=True, width="stretch")


STEP = Step(7, "Side effects: which neighbours move?", draw)
