"""The Lesson page's sidebar: the pack and its facts (the fact picker), and the student's answers so far with
their downloads."""
from __future__ import annotations

import streamlit as st

from editkit.lesson import classroom
from editkit.lesson import pack as packs
from pages.lesson_steps import keys
from pages.lesson_steps.shared import answers, fact_short


def sidebar(pack: packs.Pack) -> tuple[str | None, object]:
    """The fact picked (None for a pack without facts) and a place for the answers, drawn after the step."""
    with st.sidebar:
        st.markdown("### Lesson pack")
        m = pack.manifest
        n = len(pack.fact_ids)
        st.caption(f"{n} fact{'s' if n != 1 else ''} on **{m['model']}**, computed once when the pack was "
                   f"built{packs.built_on(m)}: every step shows these results without computing.")
        ids = pack.fact_ids
        if not ids:
            return None, None
        if st.session_state.get(keys.FACT) not in ids:
            st.session_state.pop(keys.FACT, None)  # a pack without that fact (another pack served)
        fid = st.selectbox("Fact", ids, format_func=lambda f: fact_short(pack.fact(f)), key=keys.FACT,
                           help="Subject → the answer the model gives; the whole fact heads every step.")
        return fid, st.container()  # the answers are drawn after the step (which may add one)


def my_answers(where) -> None:
    """The student's answers so far, with the downloads (sidebar)."""
    with where:
        mine = [a["row"] for a in answers().values() if a.get("row")]
        st.markdown(f"### Your answers ({len(mine)})")
        if mine:
            right = sum(r["verdict"] == "right" for r in mine)
            st.caption(f"{right} right, {sum(r['verdict'] == 'close' for r in mine)} close, "
                       f"{sum(r['verdict'] == 'wrong' for r in mine)} wrong.")
            c1, c2 = st.columns(2)
            c1.download_button("CSV", classroom.to_csv(mine), "my-lesson-answers.csv", "text/csv",
                               key=keys.DOWNLOAD_CSV)
            c2.download_button("JSON", classroom.to_json(mine), "my-lesson-answers.json", "application/json",
                               key=keys.DOWNLOAD_JSON)
