"""Attention vs FFN page: PMET's similarity curves (Li et al. 2023, Fig. 2) - how much each attention (MHSA)
and feed-forward (FFN) sub-layer changes the last token's hidden state, layer by layer, averaged over known
facts."""
import pandas as pd
import streamlit as st

from editkit.similarity import DEFAULT_N, TOP_K, definition, similarity, similarity_ram
from pages import ui


class K:
    """This page's session-state keys (its widgets and its kept result), each named once."""

    N = "sim_n"
    FACTS = "sim_facts"
    MODE = "sim_mode"
    COMPUTE = "sim_compute"
    RESULT = "sim_result"
    MODEL = "sim_model"  # the model the kept result is of
    COS_CHART, JACCARD_CHART = "sim_cos_chart", "sim_jac_chart"


JOB = "similarity curves"


def intro() -> None:
    st.title("Attention vs FFN")
    st.markdown(
        "Each layer has an attention sub-layer (MHSA) and a feed-forward sub-layer (FFN). For the last token "
        "of each fact prompt we compare the hidden state **entering** a sub-layer (x) with the state "
        "**leaving** it (y), in two ways: the cosine similarity of the vectors, and the Jaccard similarity "
        "of the top-50 tokens each state would predict under the logit lens (T(h) = top-50 of W_U · "
        "norm(h)). A value near 1 means the sub-layer barely changed the state (or its prediction); lower "
        "values mean it rewrote it."
    )
    st.latex(r"\cos(x, y) = \frac{x \cdot y}{\lVert x \rVert\,\lVert y \rVert}, \qquad "
             r"J(A, B) = \frac{|A \cap B|}{|A \cup B|}, \quad A = T(x),\ B = T(y)")
    st.markdown(
        "**What PMET found** (GPT-J 6B, 1,209 facts): in the first ~15 layers both sub-layers change the "
        "state often; after that the FFN states change slowly and settle in one direction, while the MHSA "
        "states keep changing. PMET reads this as attention being a general *knowledge extractor* and the "
        "FFN holding the facts, so it edits only FFN weights. Compute the curves below to see whether this "
        "model behaves the same way."
    )


def inputs(lm) -> tuple[int, str, str]:
    """The number of facts, which facts and what is compared, with the definition in force for this model."""
    c1, c2, c3 = st.columns([2, 1, 1])
    n = c1.slider("Number of facts n", 10, 500, DEFAULT_N, step=10, key=K.N,
                  help="PMET used 1,209 facts; the band narrows as 1/sqrt(n).")
    facts = c2.radio("Facts", ["known", "all"], key=K.FACTS, horizontal=True,
                     help="known: ROME facts this model predicts correctly (random tiny models predict "
                          "none); all: all ROME known facts.")
    mode = c3.radio("Compare", ["residual", "raw"], key=K.MODE, horizontal=True,
                    format_func={"residual": "states in/out", "raw": "x vs f(x)"}.get,
                    help="states in/out: residual entering vs leaving the sub-layer (PMET); "
                         "x vs f(x): the sub-layer's input vs its own output vector.")
    a = lm.adapter
    st.caption(f"Definition for {lm.name} ({'parallel' if a.family.parallel else 'sequential'} blocks): "
               f"{definition(a, mode)}")
    return int(n), facts, mode


def show(r) -> None:
    """The two curves, the numbers per layer and the CLI line that gives the same numbers."""
    timing = "cached result" if r.cached else ui.waited(JOB, r.seconds)
    st.subheader(f"{r.model}: {r.n} facts ({r.facts}), {timing}")
    st.caption(f"{r.definition} Shaded: {r.interval}.")
    left, right = st.columns(2)
    left.plotly_chart(r.figure("cos"), width="stretch", key=K.COS_CHART)
    left.markdown(r.conclusion("cos"))
    right.plotly_chart(r.figure("jaccard"), width="stretch", key=K.JACCARD_CHART)
    right.markdown(r.conclusion("jaccard"))
    with st.expander("Numbers per layer"):
        st.dataframe(pd.DataFrame({
            "layer": [l + 1 for l in r.layers],
            **{f"{name} {what}": getattr(r, key)[what]
               for key, name in (("mhsa_cos", "MHSA cos"), ("ffn_cos", "FFN cos"), ("mhsa_jaccard", "MHSA J"),
                                 ("ffn_jaccard", "FFN J"))
               for what in ("mean", "low", "high")},
        }), hide_index=True, width="stretch")
    st.caption(f"Top-k = {TOP_K} as in PMET. The CLI gives the same numbers: "
               f"`python -m editkit similarity --model {r.model} --facts {r.facts} --n {r.n} "
               f"--mode {r.mode} --json`.")


def main() -> None:
    intro()
    lm = ui.model_picker()
    if lm is None:
        return
    if st.session_state.get(K.MODEL) != lm.name:  # results of another model are dropped
        st.session_state.pop(K.RESULT, None)
        st.session_state[K.MODEL] = lm.name
    n, facts, mode = inputs(lm)
    ui.cancelled_note()
    if st.button("Compute similarity curves", type="primary", key=K.COMPUTE):
        with ui.guard("similarity"):
            def job(progress):
                with ui.session(lm):
                    return similarity(lm, n=n, facts=facts, mode=mode,
                                      progress=lambda f, msg: progress(f, f"{f:.0%} of the facts (cached on "
                                                                          f"disk)"))

            st.session_state[K.RESULT] = ui.run_job(JOB, job, memory=similarity_ram(lm), facts=n)
    r = st.session_state.get(K.RESULT)
    if r:
        show(r)


if __name__ == "__main__":  # Streamlit runs a page file as a script: see ui.script_run
    ui.script_run(__file__, main)
