"""Shared Streamlit pieces: the model picker, the cached model, error boxes. Pages stay thin: they gather
inputs, call editkit, and draw the results."""
from __future__ import annotations

import contextlib
import logging
import traceback

import streamlit as st

from editkit.errors import EditkitError
from editkit.models import DEFAULT_MODEL, EMBEDDED, TINY

OTHER = "other: hub id or folder"
log = logging.getLogger("editkit.app")


@st.cache_resource(show_spinner=False, max_entries=2)
def _load(name: str, trust_remote_code: bool):
    from editkit.models import load_model

    return load_model(name, trust_remote_code=trust_remote_code)


def get_lm(name: str, trust_remote_code: bool = False):
    """The model, loaded once per server process; a status box shows progress on the first load."""
    with st.status(f"Loading {name}...", expanded=False) as status:
        lm = _load(name, trust_remote_code)
        status.update(label=f"{name} ready", state="complete")
    return lm


def model_picker():
    """Sidebar model picker (embedded model preselected); returns the loaded model or None on error."""
    with st.sidebar:
        st.markdown("### Model")
        choices = [EMBEDDED, *TINY, OTHER]
        current = st.session_state.get("model_choice", DEFAULT_MODEL)
        choice = st.selectbox("Model", choices, index=choices.index(current) if current in choices else 0,
                              key="model_choice", label_visibility="collapsed")
        name, trust = choice, False
        if choice == OTHER:
            name = st.text_input("Hub id or local folder", key="model_other",
                                 placeholder="gpt2-xl or /models/llama-2-7b").strip()
            trust = st.checkbox("trust_remote_code", key="model_trust", value=False)
            if not name:
                st.info("Type a Hugging Face hub id or a local folder.")
                return None
    with guard():
        return get_lm(name, trust)
    return None


@contextlib.contextmanager
def guard(what: str = ""):
    """Show user errors as a red box, and unexpected ones as a short message (no traceback); keep running."""
    try:
        yield
    except EditkitError as exc:
        st.error(f"{what + ': ' if what else ''}{exc}")
    except Exception as exc:  # noqa: BLE001 - the app must survive any failure of one action
        log.error("unexpected error%s\n%s", f" in {what}" if what else "", traceback.format_exc())
        st.error(f"Something went wrong{' in ' + what if what else ''}: {type(exc).__name__}: {exc}. "
                 "Your inputs are kept; try again or change them.")


def model_card(lm) -> None:
    info = lm.describe()
    cols = st.columns(6)
    for col, (label, key) in zip(cols, [("family", "family"), ("layers", "layers"), ("d_model", "d_model"),
                                        ("d_ff", "d_ff"), ("parameters", "parameters"), ("device", "device")]):
        value = info[key]
        if key == "parameters":
            value = f"{value / 1e6:.1f} M"
        col.metric(label, value)
    st.caption(f"{info['name']} · {info['model_type']} · "
               f"{'parallel' if info['parallel_blocks'] else 'sequential'} attention/MLP blocks · "
               f"vocab {info['vocab']:,} · {info['dtype']}")
