"""The Lesson page's sidebar: the pack and its facts (the fact picker), and the student's answers so far with
their downloads."""
from __future__ import annotations

import streamlit as st

from editkit.lesson import classroom
from editkit.lesson import pack as packs
from pages.lesson_steps import keys
from pages.lesson_steps.building import watch_facts
from pages.lesson_steps.shared import answers, fact_short


def sidebar(pack: packs.Pack) -> tuple[str | None, object]:
    """The fact picked (None for a pack without facts) and a place for the answers, drawn after the step. The
    list holds the built facts and those being built (their first steps open), and follows the teacher's
    builds."""
    with st.sidebar:
        st.markdown("### Lesson pack")
        ids = pack.served_ids()
        n = len(ids)
        st.caption(f"{n} fact{'s' if n != 1 else ''} on **{pack.model}**, each computed once when it was "
                   "built: every step shows these results without computing.")
        watch_facts(tuple(pack.fact_ids), tuple(pack.building_ids()))
        if not ids:
            return None, None
        was = st.session_state.get(keys.FACT)
        if was not in ids:
            st.session_state.pop(keys.FACT, None)  # not in this pack (another pack, a build that stopped)
            if was and (pack.folder / "facts" / str(was)).is_dir():
                st.info("The fact you had open is no longer served: the teacher's build of it stopped.")
        fid = st.selectbox("Fact", ids, format_func=lambda f: fact_name(pack, f), key=keys.FACT,
                           help="Subject → the answer the model gives; the whole fact heads every step.")
        st.caption(built_words(pack, fid))
        return fid, st.container()  # the answers are drawn after the step (which may add one)


def fact_name(pack: packs.Pack, fid: str) -> str:
    return fact_short(pack.fact(fid)) + ("" if fid in pack.fact_ids else " (being built)")


def built_words(pack: packs.Pack, fid: str) -> str:
    """When the fact picked was built, or which of its steps are open while it is built."""
    if fid in pack.fact_ids:
        day = packs.day_of(pack.built(fid))
        return f"Built {day}." if day else ""
    open_ = [n for n in range(1, 12) if not pack.missing_for(fid, n, 0)]
    return (f"Being built now: step{'s' if len(open_) > 1 else ''} {_ranges(open_)} open, the others open as "
            "the server computes them." if open_ else "Being built now.")


def _ranges(steps: list[int]) -> str:
    """[1, 2, 3, 4, 10] -> "1-4 and 10"."""
    runs: list[list[int]] = []
    for n in steps:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    words = [f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


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
