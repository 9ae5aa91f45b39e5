"""Step 10: after hundreds of edits. Which method's lifelong run collapses first (editkit's shipped runs)?"""
from __future__ import annotations

import pandas as pd
import streamlit as st

from editkit.figures import lesson as figs
from editkit.lesson import compute, grading
from pages import ui
from pages.lesson_steps import keys
from pages.lesson_steps.asking import ask, explain, picked, try_own
from pages.lesson_steps.shared import chart
from pages.lesson_steps.step import Step


def draw(pack, fid: str, fact: dict, target: int | None = None) -> None:
    with ui.guard("the shipped lifelong run"):
        shipped = _lifelong()
        results = shipped["results"]
        first = next(iter(results.values()))
        labels = [r.get("label", m) for m, r in results.items()] + [grading.NONE]
        q = keys.question(10, fid)
        ask(pack, fid, 10, f"editkit applied {first.get('n', 500)} CounterFact edits to "
                           f"{first['model']}, one batch after another (ROME one at a time, the "
                           "others in batches of 25). Which method collapses first?",
            lambda: st.radio("Answer", labels, index=None, horizontal=True, key=q),
            lambda c: grading.grade_lifelong(results, picked(c)),
            lambda done: show_lifelong(shipped, pack, said=done["grade"] is not None), inputs=[q])
    explain(
        "Lifelong editing applies edits one batch after another, each computed on the weights the earlier "
        "ones left. Checkpoints every 100 edits measure the edits so far (a fixed sample of 50 of them, all "
        "at the last), WikiText perplexity and ‖ΔW‖; a run counts as collapsed when perplexity passes twice "
        "the unedited model's or fewer than half of the earlier successful edits still hold. Sequential ROME "
        "edits degrade a model (Gupta et al. 2024); "
        "AlphaEdit's null-space projection is meant to keep what the earlier edits and the model already "
        "stored.",
        [r"W_t = W_0 + \Delta W_1 + \dots + \Delta W_t,\qquad \text{collapse: } "
         r"\mathrm{PPL}(W_t) > 2\,\mathrm{PPL}(W_0)"], ["references"])
    try_own(10, "a short lifelong run of your own", lifelong_inputs,
            lambda lm, progress, v: compute.lifelong_run(lm, v[0], v[1], v[2], progress), show_own,
            sequential=lambda v: v[1])


def show_own(r: dict) -> None:
    st.markdown(grading.lifelong_conclusion(r["results"]))
    st.plotly_chart(figs.lifelong_figure(r["results"]), width="stretch", key=keys.chart("own_fig_10"))


def show_lifelong(shipped: dict, pack, said: bool = False) -> None:
    """The lifelong runs' conclusion (unless the feedback above already `said` it), curves and table."""
    results = shipped["results"]
    first = next(iter(results.values()))
    if not said:
        st.markdown(grading.lifelong_conclusion(results))
    chart(st, lambda: figs.lifelong_figure(results), "fig_lifelong", results)
    st.caption("Hollow markers: checkpoints measured on a fixed random sample of the edits so far; filled: "
               "on all of them.")
    st.dataframe(pd.DataFrame(figs.by_column(shipped["table"], "label")), hide_index=True, width="stretch")
    if first["model"] != pack.model:
        st.caption(f"This run is editkit's on {first['model']}; the pack's model is {pack.model}.")


@st.cache_resource(show_spinner=False)
def _lifelong() -> dict:
    return compute.lifelong()


def lifelong_inputs():
    names = [m["name"] for m in compute.methods()]
    labels = {m["name"]: m["label"] for m in compute.methods()}
    c1, c2, c3 = st.columns(3)
    chosen = c1.multiselect("Methods", names, ["rome", "memit"] if "memit" in names else names[:1],
                            format_func=labels.get, key=keys.OWN_LIFELONG_METHODS)
    n = c2.number_input("Edits", 2, 200, 10, key=keys.OWN_LIFELONG_EDITS)
    batch = c3.number_input("Batch size (ROME: 1)", 1, 50, 5, key=keys.OWN_LIFELONG_BATCH)
    return (chosen, int(n), int(batch)) if chosen else None


STEP = Step(10, "After hundreds of edits", draw)
