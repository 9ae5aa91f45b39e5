"""FFN memories page: the key-value memories active at a token (Geva et al. 2021), their trigger examples,
switching them off/on, and the paper's layer-level analyses."""
import pandas as pd
import streamlit as st

from editkit.memories import geva, triggers, vocab
from editkit.memories.inspect import memories_at
from editkit.memories.intervene import intervene, parse_memory
from editkit.memories.ram import analyses_ram, index_ram
from editkit.model.weights import model_key
from pages import ui

ui.leave_legacy_multipage_mode()

st.title("FFN memories")
st.markdown(
    "A transformer's feed-forward layer works like a key-value memory (Geva et al. 2021): each hidden unit i has a "
    "key k_i, which detects a pattern in the input, and a value v_i, a direction added to the residual stream. "
    "The coefficient m_i says how strongly memory i fires; the layer's output is the weighted sum of values:"
)
st.latex(r"\mathrm{FFN}(x) = \sum_{i=1}^{d_{ff}} f(x \cdot k_i)\, v_i = \sum_i m_i v_i, \qquad "
         r"\text{contribution}_i = |m_i|\,\lVert v_i \rVert")
lm = ui.model_picker()
if lm is None:
    st.stop()
a = lm.adapter



# stale results from another model are dropped
if st.session_state.get("mem_model") != lm.name:
    for key in ("mem_view", "mem_intervention", "mem_geva"):
        st.session_state.pop(key, None)
    st.session_state["mem_model"] = lm.name

if st.session_state.get("mem_layer", 0) >= a.n_layers:  # a model with fewer layers was picked
    st.session_state.pop("mem_layer")
if st.session_state.get("mem_geva_memories", 0) > a.d_ff:
    st.session_state.pop("mem_geva_memories")

with st.form("mem_form"):
    prompt = st.text_input("Prompt", value="The Eiffel Tower is located in the city of", key="mem_prompt")
    c1, c2, c3, c4 = st.columns(4)
    layer = c1.number_input("Layer", 0, a.n_layers - 1, a.n_layers - 1, key="mem_layer")
    position = c2.number_input("Position (-1 = last token)", -512, 511, -1, key="mem_position")
    top = c3.number_input("Top memories", 1, 50, 10, key="mem_top")
    norm = c4.checkbox("Final norm before projecting values", key="mem_norm")
    token_filter = st.radio("Value tokens", list(vocab.FILTERS), horizontal=True, key="mem_token_filter",
                            format_func={"all": "all tokens (what the model promotes)",
                                         "latin": "also: Latin-script words only (for teaching)"}.get,
                            help="A 262k multilingual vocabulary has many scripts and word pieces. The filter "
                                 "adds each memory's top Latin-script words with their rank among all tokens; "
                                 "the unfiltered top tokens stay in the table.")
    inspect_clicked = st.form_submit_button("Inspect", type="primary")

ui.cancelled_note()


@st.cache_data(max_entries=256, show_spinner=False)
def memories_shared(key: str, prompt: str, layer: int, position: int, top: int, norm: bool, token_filter: str,
                    _lm):
    """memories_at, computed once per server for the weights `key` names (weights.model_key: the model plus the
    deltas in force), so a class inspecting the teacher's example shares one computation (~0.6 s of a core on
    Gemma 3 270M); a session with kept edits has its own key."""
    return memories_at(_lm, prompt, layer, position, top, norm, token_filter=token_filter)


if inspect_clicked:
    with ui.guard("memories"):
        with ui.session(lm):
            view = memories_shared(model_key(lm), prompt, int(layer), int(position), int(top), bool(norm),
                                   token_filter, lm)
        st.session_state["mem_view"] = view

view = st.session_state.get("mem_view")
if view:
    st.subheader(f"Top memories of layer {view.layer} at token {view.position} "
                 f"({view.tokens[view.position]!r})")
    st.write(
        f"The bars rank the memories by how much they move the residual stream, |m_i| ||v_i||. Each value v_i "
        f"is read in the vocabulary as softmax(E v_i){' after the final norm' if view.norm else ''}: its top "
        f"tokens are what that memory promotes (a negative m_i flips the direction). "
        f"{view.n_active} of {a.d_ff} memories have m_i > 0 here (m ranges {view.coefficient_min:.2f} to "
        f"{view.coefficient_max:.2f})."
    )
    mems = view.memories
    ids = [t["token_id"] for m in mems for t in m.value_tokens]
    if token_filter == "all" and vocab.hard_to_read(lm, ids) > 0.5:
        st.info(f"{100 * vocab.hard_to_read(lm, ids):.0f}% of these value tokens are other scripts, word pieces or "
                "byte fragments (the model's vocabulary has 262k tokens in many scripts). To read what each memory "
                "promotes, pick **also: Latin-script words only** above and press Inspect: each memory's top "
                "Latin-script words are added with their rank among all tokens.")
    st.plotly_chart(view.figure(), width="stretch", key="mem_bars")
    # the table gets the page's whole width (beside the chart its token columns ran off the right edge)
    # the readable words (with the filter) and the kinds before the raw tokens, which come last and narrower: two
    # wide token columns ran off the right edge at 1400 px (seen in the browser walk's screenshot)
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

    st.subheader("Residual stream before and after each FFN")
    st.write(
        "The logit lens reads the residual stream h through the final norm and unembedding, "
        "p = softmax(W_U norm(h)), just before the FFN and just after its update is added "
        "(h_after = h_before + FFN(h_before)); where the top token changes, that layer's memories changed the "
        f"prediction. Definition here: {view.definition}."
    )
    st.dataframe(pd.DataFrame([{
        "layer": row.layer,
        "before FFN": " ".join(f"{t['token']!r} {t['prob']:.2f}" for t in row.before[:3]),
        "after FFN": " ".join(f"{t['token']!r} {t['prob']:.2f}" for t in row.after[:3]),
        "top changed": row.before[0]["token_id"] != row.after[0]["token_id"],
    } for row in view.lens]), hide_index=True, width="stretch")

# --- trigger examples -------------------------------------------------------------------------------------
st.subheader("Trigger examples of a key")
st.write(
    "A key k_i is a pattern detector: the corpus prefixes x_1..x_j with the largest coefficient "
    "m_i = f(x_j · k_i) show what it responds to (Geva et al. found surface patterns in low layers and semantic "
    "ones in high layers). The index covers the shipped WikiText-2 validation text and is built once per model."
)
labels = [m.label for m in view.memories] if view else []
c1, c2, c3 = st.columns(3)
pick = c1.selectbox("Memory from the list", labels or ["(inspect a prompt first)"], key="mem_trig_pick")
manual = c2.text_input("...or type one (e.g. L3.M17)", key="mem_trig_manual")
n_tokens = c3.number_input("Corpus tokens in the index", 200, 200_000, triggers.default_n_tokens(lm), step=1000,
                           key="mem_trig_tokens")
with ui.guard("trigger examples"):
    choice = manual.strip() or (pick if labels else "")
    if choice:
        t_layer, t_index = parse_memory(choice, lm)
        index = triggers.cached_index(lm, int(n_tokens))
        if index is None:
            st.info(f"No trigger index for {lm.name} over {int(n_tokens):,} tokens yet.")
            if st.button("Build the trigger index", key="mem_build_index"):
                def index_job(progress):
                    with ui.session(lm):
                        return triggers.get_index(lm, int(n_tokens), progress=progress)

                index = ui.run_job("trigger index", index_job, memory=index_ram(lm), index_tokens=int(n_tokens))
        if index is not None:
            found = triggers.examples(lm, index, t_layer, t_index, 10)
            st.caption(f"{index.meta['n_positions']:,} tokens, {index.meta['corpus']}")
            st.markdown("\n".join(
                f"{e.rank}. `{e.coefficient:.3f}` …{e.prefix[-80:]}**[{e.trigger}]** → {e.next_token!r}"
                for e in found))

# --- interventions ----------------------------------------------------------------------------------------
st.subheader("Switch memories off or on")
st.write(
    "Setting m_i = 0 removes the sub-update m_i v_i from the FFN output; switching a memory on sets m_i to the "
    "largest coefficient of its layer at that position, max_j m_j. The change applies at the inspected position "
    "only, and the greedy continuation below is generated with it in place."
)
with st.form("mem_int_form"):
    chosen = st.multiselect("Memories", labels, default=labels[:1], key="mem_int_pick")
    extra = st.text_input("More memories (comma-separated, e.g. L2.M5, L3.M17)", key="mem_int_extra")
    c1, c2 = st.columns(2)
    mode = c1.radio("Switch", ["off", "on"], horizontal=True, key="mem_int_mode")
    n_new = c2.number_input("New tokens to generate", 0, 50, 10, key="mem_int_new")
    int_clicked = st.form_submit_button("Intervene")
if int_clicked:
    with ui.guard("intervention"):
        if not view:
            st.warning("Inspect a prompt first.")
        else:
            mems = [parse_memory(s) for s in chosen] + [parse_memory(s) for s in extra.split(",") if s.strip()]
            with ui.session(lm):
                result = intervene(lm, view.prompt, mems, mode, view.position, 10, int(n_new))
            st.session_state["mem_intervention"] = result
res = st.session_state.get("mem_intervention")
if res:
    st.dataframe(res.to_frame(), hide_index=True, width="stretch")
    left, right = st.columns(2)
    for col, tops, text, title in ((left, res.before, res.continuation_before, "original"),
                                   (right, res.after, res.continuation_after, f"memories switched {res.mode}")):
        with col:
            st.markdown(f"**{title}**")
            st.dataframe(pd.DataFrame([{"token": repr(t["token"]), "p": round(t["prob"], 4)} for t in tops]),
                         hide_index=True, width="stretch")
            st.markdown(f"…{res.prompt[-40:]}**{text}**")

# --- Geva's analyses --------------------------------------------------------------------------------------
st.subheader("Layer-level analyses (Geva et al. 2021)")
st.write(
    "Over corpus samples: (1) how often a value's top token, argmax softmax(E v_i), is the token that follows its "
    "key's top trigger example, and that token's rank (Fig. 5); (2) how often the FFN output's top token differs "
    "from the top token of every one of its 10 most active memories, i.e. the output is a composition (Fig. 8); "
    "(3) the layer l from which the residual's top token already equals the final prediction (Fig. 9)."
)
d = geva.defaults(lm)
c1, c2 = st.columns(2)
g_pos = c1.number_input("Positions", 4, 4000, d["n_positions"], key="mem_geva_positions")
g_mem = c2.number_input("Memories per layer (Fig. 5)", 8, a.d_ff, min(d["memories_per_layer"], a.d_ff),
                        key="mem_geva_memories")
if st.button("Compute analyses", key="mem_geva_run"):
    with ui.guard("analyses"):
        def geva_job(progress):
            with ui.session(lm):
                return geva.analyses(lm, int(g_pos), int(g_mem), index_tokens=int(n_tokens), progress=progress)

        g = ui.run_job("layer-level analyses", geva_job, memory=analyses_ram(lm, int(g_pos)),
                       positions=int(g_pos), index_tokens=int(n_tokens))
        st.session_state["mem_geva"] = g
g = st.session_state.get("mem_geva")
if g:
    c1, c2, c3 = st.columns(3)
    c1.plotly_chart(g.figure("agreement"), width="stretch", key="mem_fig5")
    c2.plotly_chart(g.figure("composition"), width="stretch", key="mem_fig8")
    c3.plotly_chart(g.figure("fixed"), width="stretch", key="mem_fig9")
    st.caption(f"{g.n_positions} positions, {g.memories_per_layer} memories per layer, "
               f"trigger index over {g.index['n_tokens']:,} tokens; {g.corpus}")
    st.caption(f"Chance level for Fig. 5: agreement 1/{a.vocab_size:,}, median rank {a.vocab_size // 2:,}. The "
               "pipeline finds an implanted memory (a key firing on token A whose value promotes B) with rank 1 "
               "(tests/test_memories.py). On Gemma 3 270M Fig. 5 stays near chance at every layer, also when "
               "recomputed without the index and with signed coefficients: its gated FFN memories fire as often "
               "negatively (promoting -v_i) as positively, and their values rarely point at the next token of "
               "their strongest trigger (benchmarks/geva_fig5.py).")
