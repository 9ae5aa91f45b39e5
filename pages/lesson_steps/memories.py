"""Step 4: FFN memories at the traced peak. Does one of the strongest memories' values promote the answer?"""
from __future__ import annotations

import pandas as pd
import streamlit as st

from editkit.core.errors import EditkitError
from editkit.figures import lesson as figs
from editkit.lesson import compute, grading
from pages.lesson_steps import keys
from pages.lesson_steps.asking import ask, explain, try_own
from pages.lesson_steps.shared import chart, fact_prompt, needs, settings
from pages.lesson_steps.step import Step


def draw(pack, fid: str, fact: dict, target: int | None = None) -> None:
    view = needs(pack, fid, "memories", "FFN memories")
    if view is None:
        return
    token = view["tokens"][view["position"]]
    k = len(view["memories"][0]["value_tokens"]) if view["memories"] else 0
    q = keys.question(4, fid)
    ask(pack, fid, 4, f"At {token!r}, layer {view['layer']} (where the MLP trace peaks among the "
                      f"subject's tokens), the FFN adds a weighted sum of {view['d_ff']} value "
                      f"vectors. Will the value of one of its {len(view['memories'])} strongest "
                      f"memories put {view['answer']!r} among its top {k} tokens?",
        lambda: st.radio("Answer", ["yes", "no"], index=None, horizontal=True, key=q),
        lambda c: grading.grade_memories(view, _yes(c)), lambda done: show_memories(view), inputs=[q])
    explain(
        "Geva et al. (2021) read an FFN layer as d_ff key-value memories: each key k_i detects a pattern in "
        "the input, the activation gives it a coefficient m_i, and the output is the coefficient-weighted "
        "sum of the values v_i. A value read through the output embedding shows the tokens it promotes (a "
        "negative m_i, red, pushes away from them). The layer's output is usually a composition of many "
        "memories, not a copy of one.",
        [r"\mathrm{FFN}(x) = \sum_{i=1}^{d_{ff}} m_i\, v_i,\quad m = f(x K^{\top}),\quad "
         r"\text{contribution}_i = |m_i|\,\lVert v_i \rVert"], ["memories"])
    try_own(4, "the memories at a token of your prompt", lambda: memory_inputs(pack, fact),
            lambda lm, progress, v: compute.memories(lm, v[0], v[1], v[2], settings(pack)),
            lambda r: show_memories(r, "own"))


def _yes(c) -> bool:
    if c is None:
        raise EditkitError("choose an answer first")
    return c == "yes"


def memory_inputs(pack, fact):
    c1, c2, c3 = st.columns([3, 1, 1])
    prompt = c1.text_input("Prompt", fact_prompt(fact), key=keys.OWN_MEMORY_PROMPT)
    token = c2.number_input("Token (-1: the last)", -512, 511, -1, key=keys.OWN_MEMORY_TOKEN)
    layer = c3.number_input("Layer", 0, int(pack.manifest.get("layers", 1)) - 1, 0, key=keys.OWN_MEMORY_LAYER)
    return (prompt, int(token), int(layer)) if prompt.strip() else None


def show_memories(view: dict, key: str = "pack") -> None:
    st.markdown(f"Layer {view['layer']} at {view['tokens'][view['position']]!r}: {view['n_active']} of "
                f"{view['d_ff']} memories have m_i > 0 (m from {view['coefficient_min']:.2f} to "
                f"{view['coefficient_max']:.2f}).")
    chart(st, lambda: figs.memories_figure(view), f"mem_{key}", view if key == "pack" else None)
    # the column that answers the step's question next to the memory's name: after the two wide token columns
    # it was off-screen at 1,400 px
    st.dataframe(pd.DataFrame([{
        "memory": m["label"],
        f"has {view['answer']!r}": any(t["token_id"] == view["answer_id"] for t in m["value_tokens"]),
        "m_i": round(m["coefficient"], 3), "||v_i||": round(m["value_norm"], 3),
        "value tokens": " · ".join(m.get("value_text", [t["token"] for t in m["value_tokens"]])),
        "Latin-script words (rank)": " · ".join(m.get("latin_text", [])),
    } for m in view["memories"]]), hide_index=True, width="stretch",
        column_config={"value tokens": st.column_config.TextColumn(width="large"),
                       "Latin-script words (rank)": st.column_config.TextColumn(width="large")})
    st.caption("Tokens as decoded: ␣ is a leading space, � a byte fragment of a longer character. The value "
               "tokens are what the model promotes, often other scripts and word pieces of its 262k-token "
               "vocabulary; the Latin-script column adds each memory's top Latin-script words with their "
               "rank among all tokens. Point at a cell to read it whole.")


STEP = Step(4, "FFN memories at the traced peak", draw)
