"""Step 1: next-token prediction and the logit lens. At which layer does the answer first become the top
token?"""
from __future__ import annotations

import pandas as pd
import streamlit as st

from editkit.figures import lesson as figs
from editkit.lesson import compute, grading
from pages import ui
from pages.lesson_steps import keys
from pages.lesson_steps.asking import ask, explain, try_own
from pages.lesson_steps.shared import chart, fact_prompt, needs, settings
from pages.lesson_steps.step import Step


def draw(pack, fid: str, fact: dict, target: int | None = None) -> None:
    lens = needs(pack, fid, "lens", "logit lens")
    if lens is None:
        return
    L = len(lens["layers"])
    q = keys.question(1, fid)
    ask(pack, fid, 1, f"The model reads “{ui.md_escape(lens['prompt'])}”. Reading its residual stream "
                      f"after each of its {L} layers through the final norm and unembedding: at which "
                      f"layer does {lens['answer']!r} first become the top token?",
        lambda: st.slider("Layer", 0, L - 1, L // 2, key=q),
        lambda layer: grading.grade_lens(lens, int(layer)), lambda done: show_lens(lens), inputs=[q])
    explain(
        "A language model turns the prompt into a probability for every possible next token: the last "
        "layer's residual stream goes through the final norm and the unembedding W_U. The **logit lens** "
        "applies the same readout to the residual stream h_l after every layer l: what the model would say "
        "if it stopped there. Geva et al. (2021, Fig. 9) found that many predictions are already fixed "
        "before the last layer.",
        [r"p_l(x) = \mathrm{softmax}\big(W_U \cdot \mathrm{norm}(h_l)\big)[x]"])
    try_own(1, "the prediction and logit lens of your prompt",
            lambda: st.text_input("Prompt", fact_prompt(fact), key=keys.own(1, "prompt")) or None,
            lambda lm, progress, prompt: compute.lens(lm, prompt, None, settings(pack).lens_k),
            lambda r: show_lens(r, "own"))


def show_lens(lens: dict, key: str = "pack") -> None:
    top = lens["top"][0]
    st.markdown(f"Most likely next token after “{ui.md_escape(lens['prompt'][:200])}”: "
                f"**{ui.md_escape(repr(top['token']))}** (p = {top['prob']:.3f}).")
    left, right = st.columns([1, 3])
    left.dataframe(pd.DataFrame([{"token": repr(p["token"]), "p": round(p["prob"], 4)} for p in lens["top"]]),
                   hide_index=True, width="stretch")
    chart(right, lambda: figs.lens_figure(lens), f"lens_{key}", lens if key == "pack" else None)
    st.caption("Layer 0 at the bottom, the last layer on top (as on the Home page); a token cut with … is "
               "shown whole when you point at its cell.")


STEP = Step(1, "Next-token prediction and the logit lens", draw)
