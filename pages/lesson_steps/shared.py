"""What every part of the Lesson page reads: the served pack and the class's store (one per server), the
student's answers, the fact's names, a pack part or a note that it is missing, and a chart drawn once per
server."""
from __future__ import annotations

import streamlit as st

from editkit.lesson import classroom, compute
from editkit.lesson import pack as packs
from pages.lesson_steps import keys


@st.cache_resource(show_spinner=False, max_entries=4)
def _open_pack(folder: str, stamp: float) -> packs.Pack:
    """One parsed pack per server (every session reads the same parts from memory); reopened on a change."""
    return packs.Pack.open(folder)


def current_pack() -> packs.Pack:
    folder = packs.served_folder()
    try:
        stamp = (folder / packs.MANIFEST).stat().st_mtime
    except OSError:
        stamp = 0.0
    return _open_pack(str(folder), stamp)


@st.cache_resource(show_spinner=False)
def _store(path: str) -> classroom.ClassStore:
    return classroom.ClassStore(path)


def class_store() -> classroom.ClassStore:
    return _store(str(classroom.default_path()))


def lesson_id(pack: packs.Pack) -> str:
    return classroom.class_id(pack.manifest)


def answers() -> dict:
    """This session's answers: "<fact>:<step>" -> {"grade": Grade dict or None (skipped), "row": its row}."""
    return st.session_state.setdefault(keys.ANSWERS, {})


def settings(pack: packs.Pack) -> compute.Settings:
    return compute.Settings.from_dict(pack.manifest.get("settings"))


def fact_label(f: dict) -> str:
    r = f["request"]
    return f"{r['prompt'].replace('{}', r['subject'])} → {r['target_true'].strip()}"


def fact_short(f: dict) -> str:
    """The sidebar's name of a fact, subject → answer: the whole prompt was cut at the sidebar's width ("The
    Eiffel Tower is located in the"), losing the answer; the page heads every step with the whole fact."""
    r = f["request"]
    return f"{r['subject'].strip()} → {r['target_true'].strip()}"


def fact_prompt(fact: dict) -> str:
    r = fact["request"]
    return r["prompt"].replace("{}", r["subject"])


def lines(text: str) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def needs(pack: packs.Pack, fid: str, name: str, what: str):
    """A part of the pack, or a note that the pack lacks it (an interrupted build) and None."""
    value = pack.part(fid, name)
    if value is None:
        st.info(f"This step has no {what} for this fact: the pack was built without it. Your teacher can "
                "complete the pack (the same `python -m editkit lesson build` command again computes only "
                "what is missing).")
    return value


@st.cache_resource(show_spinner=False, max_entries=512)
def _figure(key: tuple, _build):
    return _build()


def chart(where, build, key: str, part=None, *extra) -> None:
    """Draw build()'s figure. A figure of a pack's part (`part` given) is built once per server and shared by
    every session (its key: the pack, its version, the part and `extra`); a live result's is built each
    time. `key`: the chart's name (keys.chart)."""
    if part is not None:
        pack = current_pack()
        fig = _figure((str(pack.folder), pack.stamp(), id(part), key, *extra), build)
    else:
        fig = build()
    where.plotly_chart(fig, width="stretch", key=keys.chart(key))


def fast_caption(trace: dict) -> None:
    """Under a trace computed in the engine's fast mode (the pack's settings say which are): what it is and
    its measured error."""
    meta = trace.get("meta", {})
    if meta.get("approximation"):
        st.caption(compute.fast_note(meta.get("model") or current_pack().model))
