"""Step 9: does the traced layer edit best? ROME at every layer, one at a time."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from editkit.figures import lesson as figs
from editkit.lesson import compute, grading
from pages.lesson_steps import keys
from pages.lesson_steps.asking import ask, chosen, explain, own_request, try_own
from pages.lesson_steps.shared import chart, needs, settings
from pages.lesson_steps.step import Step


def draw(pack, fid: str, fact: dict, target: int | None = None) -> None:
    sweep = needs(pack, fid, "sweep", "layer sweep")
    tr = pack.part(fid, "trace")
    if sweep is None:
        return
    peak = sweep.get("peak_layer")
    new = sweep["request"]["target_new"].strip()
    token = (sweep.get("trace") or {}).get("token", "the subject")
    mlp = (tr or {}).get("traces", {}).get("mlp")
    q = keys.question(9, fid)
    ask(pack, fid, 9, f"The MLP trace at {token!r} peaks at layer {peak}. ROME edited "
                      f"the fact to {new!r} at every layer, one at a time. Is the traced layer "
                      "(within one layer) the one where the edit works best?",
        lambda: st.radio("Answer", range(len(grading.SWEEP_CHOICES)),
                         format_func=grading.SWEEP_CHOICES.__getitem__, index=None, key=q),
        lambda c: grading.grade_sweep(sweep, chosen(c)),
        lambda done: show_sweep(sweep, mlp, said=done["grade"] is not None), inputs=[q])
    explain(
        "ROME edits the layer where tracing finds the MLP effect. Hase et al. (2023) edited every layer "
        "instead and found that editing success barely correlates with where tracing localises the fact: the "
        "best layer to edit is often not the traced peak. The lower chart shows, per edited layer, P(new) − "
        "P(true) on the prompt and a paraphrase (higher: the edit works) and P(true) − P(new) on neighbours "
        "(higher: nothing leaked); the best layer has the largest sum of the three. Those margins are "
        "measured on a handful of prompts: a layer whose sum differs from the best by less than the spread "
        "over the prompts (1.96 standard errors of the paired differences) is within noise of it.",
        [r"\text{rewrite score} = \frac{P_{\text{post}}(o^*) - P_{\text{pre}}(o^*)}{1 - "
         r"P_{\text{pre}}(o^*)}"])
    try_own(9, "ROME at several layers on your own fact", lambda: sweep_inputs(fact),
            lambda lm, progress, v: compute.layer_sweep(lm, v[0], None, settings(pack), v[1], progress),
            lambda r: show_sweep(r, None, "own"), samples=settings(pack).samples)


def sweep_inputs(fact):
    rec = own_request(9, fact)
    layers = st.text_input("Layers ('all', '2,4,6' or '0-5'; each edit takes seconds to a minute)", "0-5",
                           key=keys.OWN_SWEEP_LAYERS)
    return (rec, layers) if rec is not None and layers.strip() else None


def show_sweep(sweep: dict, mlp_trace, key: str = "pack", said: bool = False) -> None:
    """The sweep's conclusion (unless the feedback above already `said` it), its figure and table."""
    if not said:
        st.markdown(grading.sweep_conclusion(sweep))
    chart(st, lambda: figs.sweep_figure(sweep, mlp_trace), f"sweep_{key}", sweep if key == "pack" else None)
    st.dataframe(pd.DataFrame([{"layer": r["layer"], "efficacy margin": r["efficacy_magnitude"],
                                "generalization margin": r["generalization_magnitude"],
                                "specificity margin": r["specificity_magnitude"],
                                "rewrite score": r["rewrite_score"]} for r in sweep["rows"]]),
                 hide_index=True, width="stretch")


STEP = Step(9, "Does the traced layer edit best?", draw)
