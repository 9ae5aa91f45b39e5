"""The new target a student edits to (steps 5-8 and 11), kept across steps and facts."""
from __future__ import annotations

import streamlit as st

from pages.lesson_steps import keys


def pick_target(fid: str, fact: dict) -> int:
    """The new target the student edits to (kept for steps 5-8 and 11). Kept also under a key of its own:
    Streamlit drops a widget's value after a run that does not draw it, so a step without the picker or
    another fact reset it to the first target (and the answer given for the one picked no longer showed)."""
    targets = fact["targets"]
    key, kept = keys.target(fid)
    if key not in st.session_state:
        st.session_state[key] = st.session_state.get(kept, 0)
    if st.session_state[key] >= len(targets):
        st.session_state[key] = 0
    t = st.selectbox("New target", range(len(targets)), format_func=lambda i: targets[i].strip(), key=key)
    st.session_state[kept] = t
    return t
