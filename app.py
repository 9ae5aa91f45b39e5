"""editkit: an interactive workbench for locating and editing facts in transformer language models.

Run with `streamlit run app.py`. This file is the home page and the navigation; each other view is a file in
pages/ that calls the editkit library.
"""
import streamlit as st

from editkit.lens import predict_with_lens
from editkit.model.weights import model_key
from pages import ui

ui.leave_legacy_multipage_mode()

st.set_page_config(page_title="editkit", page_icon="🔬", layout="wide")


def home():
    st.title("editkit")
    st.write(
        "Find where a language model stores a fact, look inside its feed-forward memories, and rewrite the fact "
        f"with {ui.method_list('or')} while watching the side effects. Pick a model in the sidebar; the embedded "
        "Gemma 3 270M works offline."
    )
    lm = ui.model_picker()
    if lm is None:
        return
    ui.model_card(lm)

    st.subheader("Next-token prediction and logit lens")
    st.write(
        "The model turns a prompt into a probability for every possible next token, "
        "p(x) = softmax(W_U · norm(h_L))[x]. The **logit lens** applies the same final norm and unembedding "
        "to the residual stream h_l after each layer l, showing what the model 'would say' if it stopped there."
    )
    prompt = st.text_input("Prompt", value="The Eiffel Tower is located in the city of", key="home_prompt")
    k = st.slider("Top tokens", 3, 20, 8, key="home_k")
    n_edits = len(ui.my_edits(lm))
    if n_edits:
        st.caption(f"Computed with your {n_edits} kept edit(s) (sidebar); other users see the base model.")
    with ui.guard("prediction"):
        with ui.session(lm):  # this session's kept edits; other sessions' edits are never visible here
            st.session_state["home_result"] = predict_shared(model_key(lm), prompt, k, lm)
    shown = st.session_state.get("home_result")
    if shown and shown[0].model == lm.name:
        if shown[0].prompt != prompt or len(shown[0]) != k:
            st.caption(f"Still showing the last result, for the prompt {shown[0].prompt[:80]!r}.")
        show_prediction(*shown)


@st.cache_data(max_entries=512, show_spinner=False)
def predict_shared(key: str, prompt: str, k: int, _lm):
    """The top-k predictions and the logit lens of `prompt`, computed once per server for the weights `key` names
    (weights.model_key: the model plus the deltas in force), so a class typing the same prompts (the default one,
    the teacher's examples) shares one computation; a session with kept edits has its own key. One run gives both
    (lens.predict_with_lens): a new prompt costs one forward pass and one vocabulary projection."""
    return predict_with_lens(_lm, prompt, k)


def show_prediction(preds, lens) -> None:
    """The most likely token, the top-k table and the logit-lens heatmap of one prediction."""
    top = preds.top
    st.markdown(f"Prediction for “{ui.md_escape(preds.prompt[:200])}”: most likely next token "
                f"**{ui.md_escape(repr(top.token))}** (p = {top.prob:.4f}).")
    left, right = st.columns([1, 3])  # the lens's cells need the room to show their tokens at a readable size
    with left:
        st.dataframe([{"token": repr(p.token), "probability": round(p.prob, 4)} for p in preds],
                     hide_index=True, width="stretch")
    with right:
        st.plotly_chart(lens.figure(), width="stretch")
    st.caption("Layer 0 at the bottom, the last layer on top; a token cut with … is shown whole when you point at "
               "its cell.")


PAGES = [
    st.Page(home, title="Home", icon="🏠", default=True),
    st.Page("pages/causal_tracing.py", title="Causal tracing", icon="🔥"),
    st.Page("pages/ffn_memories.py", title="FFN memories", icon="🧠"),
    st.Page("pages/edit_compare.py", title="Edit & compare", icon="✏️"),
    st.Page("pages/attention_vs_ffn.py", title="Attention vs FFN", icon="⚖️"),
    st.Page("pages/lesson.py", title="Lesson", icon="🎓"),
]

st.navigation(PAGES).run()
