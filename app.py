"""editkit: an interactive workbench for locating and editing facts in transformer language models.

Run with `streamlit run app.py`. This file is the home page and the navigation; each other view is a file in
pages/ whose main() draws it (pages/ui.py: the pieces they share). Streamlit runs this file for every page:
its st.navigation lists the pages and runs the one the URL asks for.
"""
import streamlit as st

from editkit.lens import predict_with_lens
from editkit.model.weights import model_key
from pages import ui


class K:
    """The home page's session-state keys, each named once."""

    PROMPT, TOP_K, RESULT = "home_prompt", "home_k", "home_result"


HEADING_CHARS = 200  # the most of a prompt the prediction's heading quotes


def home():
    st.title("editkit")
    st.write(
        f"Find where a language model stores a fact, look inside its feed-forward memories, and rewrite the "
        f"fact with {ui.method_list('or')} while watching the side effects. Pick a model in the sidebar; the "
        f"embedded Gemma 3 270M works offline."
    )
    lm = ui.model_picker()
    if lm is None:
        return
    ui.model_card(lm)

    st.subheader("Next-token prediction and logit lens")
    st.write(
        "The model turns a prompt into a probability for every possible next token, p(x) = softmax(W_U · "
        "norm(h_L))[x]. The **logit lens** applies the same final norm and unembedding to the residual "
        "stream h_l after each layer l, showing what the model 'would say' if it stopped there."
    )
    prompt = st.text_input("Prompt", value="The Eiffel Tower is located in the city of", key=K.PROMPT)
    k = st.slider("Top tokens", 3, 20, 8, key=K.TOP_K)
    n_edits = len(ui.my_edits(lm))
    if n_edits:
        st.caption(f"Computed with your {n_edits} kept edit(s) (sidebar); other users see the base model.")
    with ui.guard("prediction"):
        with ui.session(lm):  # this session's kept edits; other sessions' edits are never visible here
            st.session_state[K.RESULT] = predict_shared(model_key(lm), prompt, k, lm)
    shown = st.session_state.get(K.RESULT)
    if shown and shown[0].model == lm.name:
        if shown[0].prompt != prompt or len(shown[0]) != k:
            st.caption(f"Still showing the last result, for the prompt {ui.clip(shown[0].prompt, 80)!r}.")
        show_prediction(*shown)


@st.cache_data(max_entries=512, show_spinner=False)
def predict_shared(key: str, prompt: str, k: int, _lm):
    """The top-k predictions and the logit lens of `prompt`, computed once per server for the weights `key`
    names (weights.model_key: the model plus the deltas in force), so a class typing the same prompts (the
    default one, the teacher's examples) shares one computation; a session with kept edits has its own key.
    One run gives both (lens.predict_with_lens): a new prompt costs one forward pass and one vocabulary
    projection."""
    return predict_with_lens(_lm, prompt, k)


def show_prediction(preds, lens) -> None:
    """The most likely token, the top-k table and the logit-lens heatmap of one prediction."""
    top = preds.top
    st.markdown(f"Prediction for “{ui.md_escape(ui.clip(preds.prompt, HEADING_CHARS))}”: most likely next "
                f"token **{ui.md_escape(repr(top.token))}** (p = {top.prob:.4f}).")
    left, right = st.columns([1, 3])  # the lens's cells need the room to show their tokens at a readable size
    with left:
        st.dataframe([{"token": repr(p.token), "probability": round(p.prob, 4)} for p in preds],
                     hide_index=True, width="stretch")
    with right:
        st.plotly_chart(lens.figure(), width="stretch")
    st.caption("Layer 0 at the bottom, the last layer on top; a token cut with … is shown whole when you "
               "point at its cell.")


# Each page by its module's main(), at the URL of its file's name (what Streamlit's legacy pages/ mode serves
# it at too, ui.script_run); the lesson stays a file page until it has a main().
PAGES = [
    st.Page(home, title="Home", icon="🏠", default=True),
    st.Page("pages/causal_tracing.py", title="Causal tracing", icon="🔥"),
    st.Page("pages/ffn_memories.py", title="FFN memories", icon="🧠"),
    st.Page("pages/edit_compare.py", title="Edit & compare", icon="✏️"),
    st.Page("pages/attention_vs_ffn.py", title="Attention vs FFN", icon="⚖️"),
    st.Page("pages/lesson.py", title="Lesson", icon="🎓"),
]

st.set_page_config(page_title="editkit", page_icon="🔬", layout="wide")
with ui.navigation_run():
    st.navigation(PAGES).run()
