"""FFN memories page: the key-value memories active at a token (Geva et al. 2021), their trigger examples,
switching them off/on, and the paper's layer-level analyses."""
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from editkit.core.errors import EditkitError
from editkit.memories import geva, triggers, vocab
from editkit.memories.inspect import memories_at
from editkit.memories.intervene import intervene, parse_memory
from editkit.memories.ram import analyses_ram, index_ram
from editkit.model.weights import model_key
from pages import ui


class K:
    """This page's session-state keys (its forms, widgets and kept results), each named once."""

    FORM, PROMPT, LAYER, POSITION, TOP, NORM, FILTER = ("mem_form", "mem_prompt", "mem_layer", "mem_position",
                                                        "mem_top", "mem_norm", "mem_token_filter")
    VIEW, INTERVENTION, GEVA, MODEL = "mem_view", "mem_intervention", "mem_geva", "mem_model"
    BARS, INT_LABELS = "mem_bars", "mem_int_labels"  # INT_LABELS: the memories the pick was last set from
    TRIG_PICK, TRIG_MANUAL, TRIG_TOKENS, BUILD_INDEX = ("mem_trig_pick", "mem_trig_manual", "mem_trig_tokens",
                                                        "mem_build_index")
    INT_FORM, INT_PICK, INT_EXTRA, INT_MODE, INT_NEW = ("mem_int_form", "mem_int_pick", "mem_int_extra",
                                                        "mem_int_mode", "mem_int_new")
    GEVA_POSITIONS, GEVA_MEMORIES, GEVA_RUN = "mem_geva_positions", "mem_geva_memories", "mem_geva_run"
    FIGURES = {"agreement": "mem_fig5", "composition": "mem_fig8", "fixed": "mem_fig9"}


@dataclass(frozen=True)
class Inspection:
    """What the inspect form asks for (the memories_at call it makes)."""

    prompt: str
    layer: int
    position: int
    top: int
    norm: bool
    token_filter: str

    def matches(self, view) -> bool:
        """Whether `view` (a MemoriesView) answers this request (the table below the form is for it)."""
        return (view.prompt, view.layer, bool(view.norm)) == (self.prompt, self.layer, self.norm) and \
            len(view.memories) == self.top


def intro() -> None:
    st.title("FFN memories")
    st.markdown(
        "A transformer's feed-forward layer works like a key-value memory (Geva et al. 2021): each hidden "
        "unit i has a key k_i, which detects a pattern in the input, and a value v_i, a direction added to "
        "the residual stream. The coefficient m_i says how strongly memory i fires; the layer's output is "
        "the weighted sum of values:"
    )
    st.latex(r"\mathrm{FFN}(x) = \sum_{i=1}^{d_{ff}} f(x \cdot k_i)\, v_i = \sum_i m_i v_i, \qquad "
             r"\text{contribution}_i = |m_i|\,\lVert v_i \rVert")


def forget_other_models(lm) -> None:
    """Results and inputs of another model are dropped (a smaller model's layers would be out of range)."""
    a = lm.adapter
    if st.session_state.get(K.MODEL) != lm.name:
        for key in (K.VIEW, K.INTERVENTION, K.GEVA):
            st.session_state.pop(key, None)
        st.session_state[K.MODEL] = lm.name
    if st.session_state.get(K.LAYER, 0) >= a.n_layers:
        st.session_state.pop(K.LAYER)
    if st.session_state.get(K.GEVA_MEMORIES, 0) > a.d_ff:
        st.session_state.pop(K.GEVA_MEMORIES)


def inspect_form(lm) -> tuple[Inspection, bool]:
    """The inspect form: what it asks for, and whether Inspect was pressed."""
    a = lm.adapter
    with st.form(K.FORM):
        prompt = st.text_input("Prompt", value="The Eiffel Tower is located in the city of", key=K.PROMPT)
        c1, c2, c3, c4 = st.columns([1, 1, 1, 1.6])  # a quarter of the form cut the checkbox's label
        layer = c1.number_input("Layer", 0, a.n_layers - 1, a.n_layers - 1, key=K.LAYER)
        position = c2.number_input("Position (-1 = last token)", -512, 511, -1, key=K.POSITION)
        top = c3.number_input("Top memories", 1, 50, 10, key=K.TOP)
        c4.markdown("&nbsp;")  # the checkbox level with the number boxes, below their labels
        norm = c4.checkbox("Final norm before projecting values", key=K.NORM,
                           help="Read each value v_i through the model's final norm before the unembedding, "
                                "as the logit lens reads the residual stream.")
        token_filter = st.radio("Value tokens", list(vocab.FILTERS), horizontal=True, key=K.FILTER,
                                format_func={"all": "all tokens (what the model promotes)",
                                             "latin": "also: Latin-script words only (for teaching)"}.get,
                                help="A 262k multilingual vocabulary has many scripts and word pieces. The "
                                     "filter adds each memory's top Latin-script words with their rank among "
                                     "all tokens; the unfiltered top tokens stay in the table.")
        clicked = st.form_submit_button("Inspect", type="primary")
    return Inspection(prompt, int(layer), int(position), int(top), bool(norm), token_filter), clicked


@st.cache_data(max_entries=256, show_spinner=False)
def memories_shared(key: str, prompt: str, layer: int, position: int, top: int, norm: bool, token_filter: str,
                    _lm):
    """memories_at, computed once per server for the weights `key` names (weights.model_key: the model plus
    the deltas in force), so a class inspecting the teacher's example shares one computation (~0.6 s of a core
    on Gemma 3 270M); a session with kept edits has its own key."""
    return memories_at(_lm, prompt, layer, position, top, norm, token_filter=token_filter)


def memory_table(lm, view, token_filter: str) -> None:
    """The bars and the table of the top memories, their value tokens read in the vocabulary."""
    mems = view.memories
    ids = [t["token_id"] for m in mems for t in m.value_tokens]
    if token_filter == "all" and vocab.hard_to_read(lm, ids) > 0.5:
        st.info(f"{100 * vocab.hard_to_read(lm, ids):.0f}% of these value tokens are other scripts, word "
                "pieces or byte fragments (the model's vocabulary has 262k tokens in many scripts). To read "
                "what each memory promotes, pick **also: Latin-script words only** above and press Inspect: "
                "each memory's top Latin-script words are added with their rank among all tokens.")
    st.plotly_chart(view.figure(), width="stretch", key=K.BARS)
    # the whole width, the readable words (with the filter) and the kinds before the raw tokens, which come
    # last and narrower: two wide token columns ran off the right edge at 1400 px (the browser walk's
    # screenshot)
    words = any(m.filtered_tokens for m in mems)
    st.dataframe(pd.DataFrame([{
        "memory": m.label, "m_i": round(m.coefficient, 3), "||v_i||": round(m.value_norm, 3),
        "contribution": round(m.contribution, 3),
        **({"Latin-script words (rank among all)": " · ".join(
            f"{vocab.readable(t['token'])} (#{t['rank']:,})" for t in m.filtered_tokens)} if words else {}),
        "kinds": ", ".join(f"{n} {c}" for c, n in vocab.class_counts(
            lm, [t["token_id"] for t in m.value_tokens]).items()),
        "value tokens": " · ".join(vocab.readable(t["token"]) for t in m.value_tokens),
    } for m in mems]), hide_index=True, width="stretch",
        column_config={"memory": st.column_config.TextColumn(width="small"),
                       "value tokens": st.column_config.TextColumn(width="medium" if words else "large"),
                       "Latin-script words (rank among all)": st.column_config.TextColumn(width="large")})
    st.caption("Tokens as decoded: ␣ is a leading space, ⏎ a newline, � an incomplete UTF-8 piece (a "
               "byte fragment of a longer character). \"kinds\" counts Latin-script words, other scripts, "
               "numbers, punctuation and fragments among them. Point at a cell to read it whole.")


def lens_table(view) -> None:
    st.subheader("Residual stream before and after each FFN")
    st.write(
        "The logit lens reads the residual stream h through the final norm and unembedding, p = softmax(W_U "
        "norm(h)), just before the FFN and just after its update is added (h_after = h_before + "
        "FFN(h_before)); where the top token changes, that layer's memories changed the prediction. "
        f"Definition here: {view.definition}."
    )
    st.dataframe(pd.DataFrame([{
        "layer": row.layer,
        "before FFN": " ".join(f"{t['token']!r} {t['prob']:.2f}" for t in row.before[:3]),
        "after FFN": " ".join(f"{t['token']!r} {t['prob']:.2f}" for t in row.after[:3]),
        "top changed": row.before[0]["token_id"] != row.after[0]["token_id"],
    } for row in view.lens]), hide_index=True, width="stretch")


def memories_section(lm) -> None:
    """The form, the inspection it asks for, and the kept view (with a note when it is not the form's
    request)."""
    asked, clicked = inspect_form(lm)
    ui.cancelled_note()
    if clicked:
        with ui.guard("memories"):
            with ui.session(lm):
                st.session_state[K.VIEW] = memories_shared(model_key(lm), asked.prompt, asked.layer,
                                                           asked.position, asked.top, asked.norm,
                                                           asked.token_filter, lm)
    view = st.session_state.get(K.VIEW)
    if not view:
        return
    if not asked.matches(view):  # a refused Inspect (or a changed form) leaves the last inspection's memories
        st.caption(f"These memories are for “{ui.md_escape(ui.clip(view.prompt, 120))}” at layer "
                   f"{view.layer}, the last inspection that finished, not for the form above: press "
                   "**Inspect** to run it.")
    st.subheader(f"Top memories of layer {view.layer} at token {view.position} "
                 f"({view.tokens[view.position]!r})")
    st.write(
        "The bars rank the memories by how much they move the residual stream, |m_i| ||v_i||. Each value v_i "
        f"is read in the vocabulary as softmax(E v_i){' after the final norm' if view.norm else ''}: its top "
        f"tokens are what that memory promotes (a negative m_i flips the direction). {view.n_active} of "
        f"{lm.adapter.d_ff} memories have m_i > 0 here (m ranges {view.coefficient_min:.2f} to "
        f"{view.coefficient_max:.2f})."
    )
    memory_table(lm, view, asked.token_filter)
    lens_table(view)


def triggers_section(lm, labels: list[str]) -> int:
    """Trigger examples of one memory from the corpus index (built on demand); returns the index size asked
    for, which the layer-level analyses use too."""
    st.subheader("Trigger examples of a key")
    st.write(
        "A key k_i is a pattern detector: the corpus prefixes x_1..x_j with the largest coefficient m_i = "
        "f(x_j · k_i) show what it responds to (Geva et al. found surface patterns in low layers and "
        "semantic ones in high layers). The index covers the shipped WikiText-2 validation text and is built "
        "once per model."
    )
    c1, c2, c3 = st.columns(3)
    pick = c1.selectbox("Memory from the list", labels or ["(inspect a prompt first)"], key=K.TRIG_PICK)
    manual = c2.text_input("...or type one (e.g. L3.M17)", key=K.TRIG_MANUAL)
    n_tokens = int(c3.number_input("Corpus tokens in the index", 200, 200_000, triggers.default_n_tokens(lm),
                                   step=1000, key=K.TRIG_TOKENS))
    with ui.guard("trigger examples"):
        choice = manual.strip() or (pick if labels else "")
        if not choice:
            return n_tokens
        t_layer, t_index = parse_memory(choice, lm)
        index = triggers.cached_index(lm, n_tokens)
        if index is None:
            st.info(f"No trigger index for {lm.name} over {n_tokens:,} tokens yet.")
            if st.button("Build the trigger index", key=K.BUILD_INDEX):
                def index_job(progress):
                    with ui.session(lm):
                        return triggers.get_index(lm, n_tokens, progress=progress)

                index = ui.run_job("trigger index", index_job, memory=index_ram(lm), index_tokens=n_tokens)
        if index is not None:
            found = triggers.examples(lm, index, t_layer, t_index, 10)
            st.caption(f"{index.meta['n_positions']:,} tokens, {index.meta['corpus']}")
            st.markdown("\n".join(
                f"{e.rank}. `{e.coefficient:.3f}` "
                f"…{ui.md_escape(e.prefix[-80:])}**[{ui.md_escape(e.trigger)}]** → "
                f"{ui.md_escape(repr(e.next_token))}" for e in found))
    return n_tokens


def intervention_section(lm, view, labels: list[str]) -> None:
    st.subheader("Switch memories off or on")
    st.write(
        "Setting m_i = 0 removes the sub-update m_i v_i from the FFN output; switching a memory on sets m_i "
        "to the largest coefficient of its layer at that position, max_j m_j. The change applies at the "
        "inspected position only, and the greedy continuation below is generated with it in place."
    )
    if st.session_state.get(K.INT_LABELS) != labels or K.INT_PICK not in st.session_state:
        # a new inspection: its top memory picked (a kept pick of the last one's memories showed as none)
        st.session_state[K.INT_LABELS], st.session_state[K.INT_PICK] = labels, labels[:1]
    with st.form(K.INT_FORM):
        chosen = st.multiselect("Memories", labels, key=K.INT_PICK)
        extra = st.text_input("More memories (comma-separated, e.g. L2.M5, L3.M17)", key=K.INT_EXTRA)
        c1, c2 = st.columns(2)
        mode = c1.radio("Switch", ["off", "on"], horizontal=True, key=K.INT_MODE)
        n_new = c2.number_input("New tokens to generate", 0, 50, 10, key=K.INT_NEW)
        clicked = st.form_submit_button("Intervene")
    if clicked:
        with ui.guard("intervention"):
            if not view:
                st.warning("Inspect a prompt first.")
            else:
                typed = [s for s in extra.split(",") if s.strip()]
                if not chosen and not typed:  # it ran, and "switched off" showed the unchanged model
                    raise EditkitError("pick a memory from the list or type one (e.g. L3.M17) to switch")
                mems = [parse_memory(s) for s in [*chosen, *typed]]
                with ui.session(lm):
                    st.session_state[K.INTERVENTION] = intervene(lm, view.prompt, mems, mode, view.position,
                                                                 10, int(n_new))
    res = st.session_state.get(K.INTERVENTION)
    if not res:
        return
    st.dataframe(res.to_frame(), hide_index=True, width="stretch")
    left, right = st.columns(2)
    for col, tops, text, title in ((left, res.before, res.continuation_before, "original"),
                                   (right, res.after, res.continuation_after, "memories switched "
                                                                              f"{res.mode}")):
        with col:
            st.markdown(f"**{title}**")
            st.dataframe(pd.DataFrame([{"token": repr(t["token"]), "p": round(t["prob"], 4)} for t in tops]),
                         hide_index=True, width="stretch")
            st.markdown(f"…{ui.md_escape(res.prompt[-40:])}{strong(ui.continuation(text))}")


def strong(markdown: str) -> str:
    """`markdown` in bold, its spaces at either end outside the ** (markdown reads '** Ecuador**' literally:
    the FFN page showed a continuation as 'of** Ecuador, and is ...**')."""
    core = markdown.strip()
    if not core:
        return markdown
    start = markdown.index(core)
    return f"{markdown[:start]}**{core}**{markdown[start + len(core):]}"


def analyses_section(lm, n_tokens: int) -> None:
    """Geva et al.'s three layer-level analyses over corpus samples."""
    a = lm.adapter
    st.subheader("Layer-level analyses (Geva et al. 2021)")
    st.write(
        "Over corpus samples: (1) how often a value's top token, argmax softmax(E v_i), is the token that "
        "follows its key's top trigger example, and that token's rank (Fig. 5); (2) how often the FFN "
        "output's top token differs from the top token of every one of its 10 most active memories, i.e. the "
        "output is a composition (Fig. 8); (3) the layer l from which the residual's top token already "
        "equals the final prediction (Fig. 9)."
    )
    d = geva.defaults(lm)
    c1, c2 = st.columns(2)
    g_pos = int(c1.number_input("Positions", 4, 4000, d["n_positions"], key=K.GEVA_POSITIONS))
    g_mem = int(c2.number_input("Memories per layer (Fig. "
                                "5)", 8, a.d_ff, min(d["memories_per_layer"], a.d_ff),
                                key=K.GEVA_MEMORIES))
    if st.button("Compute analyses", key=K.GEVA_RUN):
        with ui.guard("analyses"):
            def geva_job(progress):
                with ui.session(lm):
                    return geva.analyses(lm, g_pos, g_mem, index_tokens=n_tokens, progress=progress)

            st.session_state[K.GEVA] = ui.run_job("layer-level analyses", geva_job,
                                                  memory=analyses_ram(lm, g_pos), positions=g_pos,
                                                  index_tokens=n_tokens)
    g = st.session_state.get(K.GEVA)
    if not g:
        return
    for col, (what, key) in zip(st.columns(3), K.FIGURES.items()):
        col.plotly_chart(g.figure(what), width="stretch", key=key)
    st.caption(f"{g.n_positions} positions, {g.memories_per_layer} memories per layer, "
               f"trigger index over {g.index['n_tokens']:,} tokens; {g.corpus}")
    st.caption(f"Chance level for Fig. 5: agreement 1/{a.vocab_size:,}, median rank {a.vocab_size // 2:,}. "
               "The pipeline finds an implanted memory (a key firing on token A whose value promotes B) with "
               "rank 1 (tests/test_memories.py). On Gemma 3 270M Fig. 5 stays near chance at every layer, "
               "also when recomputed without the index and with signed coefficients: its gated FFN memories "
               "fire as often negatively (promoting -v_i) as positively, and their values rarely point at "
               "the next token of their strongest trigger (benchmarks/geva_fig5.py).")


def main() -> None:
    intro()
    lm = ui.model_picker()
    if lm is None:
        return
    forget_other_models(lm)
    memories_section(lm)
    view = st.session_state.get(K.VIEW)
    labels = [m.label for m in view.memories] if view else []
    n_tokens = triggers_section(lm, labels)
    intervention_section(lm, view, labels)
    analyses_section(lm, n_tokens)


if __name__ == "__main__":  # Streamlit runs a page file as a script: see ui.script_run
    ui.script_run(__file__, main)
