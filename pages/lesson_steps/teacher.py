"""Teacher mode of the Lesson page: who is a teacher, the class's answers per fact and step, clearing them,
and adding a fact to the served pack (the `lesson build` computation as a job on this server)."""
from __future__ import annotations

import hmac
import time

import pandas as pd
import streamlit as st

from editkit.core.errors import EditkitError
from editkit.core.progress import duration, elapsed
from editkit.core.settings import settings as server_settings
from editkit.editing.requests import NEIGHBOURS_HELP, NEIGHBOURS_LABEL
from editkit.lesson import compute
from editkit.lesson import pack as packs
from pages import ui
from pages.lesson_steps import keys
from pages.lesson_steps.asking import TARGET_SEP
from pages.lesson_steps.building import parts_table
from pages.lesson_steps.registry import STEPS
from pages.lesson_steps.shared import class_store, fact_label, lesson_id, lines


def is_teacher() -> bool:
    """With a teacher passphrase set (settings teacher.passphrase or EDITKIT_TEACHER_PASSPHRASE), the
    passphrase typed in the sidebar; without one, ?teacher=1 from a browser on the server's own machine only
    (a laptop of one's own); from another machine it is refused with the setting to set."""
    conf = server_settings()
    secret = conf.teacher_passphrase
    if secret:
        typed = st.sidebar.text_input("Teacher passphrase", type="password", key=keys.TEACHER_PASS)
        if typed and not hmac.compare_digest(typed.encode(), secret.encode()):
            st.sidebar.warning(f"That is not the teacher passphrase ({conf.cite('teacher.passphrase')}).")
            return False
        return bool(typed)
    if st.query_params.get("teacher") != "1":
        return False
    who = ui.visitor()
    if who.local:
        return True
    st.sidebar.warning(f"Teacher mode from {who.describe()} needs a passphrase, and this server has none "
                       f"({conf.cite('teacher.passphrase')}); the teacher sets one, or opens this page on "
                       "the server's own machine.")
    return False


def teacher_view(pack) -> None:
    st.divider()
    st.header("Teacher")
    st.subheader("The class's answers")
    store = class_store()
    class_answers(pack, store.summary(lesson_id(pack)))
    m = pack.manifest
    st.caption(f"Stored in {store.path} (SQLite), for this class: the answers stay when facts are added or "
               f"dropped. The pack: {pack.folder}, computed by editkit {m.get('editkit_version')} on "
               f"{m['model']} (weights digest {m['fingerprint']}).")
    confirm = st.checkbox("Yes, delete this lesson's answers", key=keys.CLEAR_CONFIRM)
    if st.button("Clear the class's answers", key=keys.CLEAR, disabled=not confirm):
        n = store.clear(lesson_id(pack))
        st.session_state.pop(keys.CLEAR_CONFIRM, None)
        st.success(f"Cleared {n} answer(s).")
    add_fact_form(pack)


def class_answers(pack, rows: list[dict]) -> None:
    """One table per fact (a fact column beside the step and the answers pushed them off-screen)."""
    by_fact: dict = {}
    for r in rows:
        by_fact.setdefault(where_label(pack, r["fact"]), []).append(r)
    for i, (fact, group) in enumerate(by_fact.items()):
        st.markdown(f"**{ui.md_escape(fact)}**")
        # the answers beside the step: last, after the counts, they were off-screen at 1,400 px
        st.dataframe(pd.DataFrame([{
            "step": f"{r['step']}. {STEPS[int(r['step'])].title if int(r['step']) in STEPS else ''}",
            "answers (most frequent first)": "; ".join(f"{a} ({n})"
                                                       for a, n in list(r["answers"].items())[:4]),
            "students": r["students"], "right": r["right"], "close": r["close"], "wrong": r["wrong"],
            "first answers right / close / wrong": "{right} / {close} / {wrong}".format(**r["first"]),
            "mean score": round(r["mean_score"], 2) if r["mean_score"] is not None else None,
        } for r in group]), hide_index=True, width="stretch", key=keys.class_answers(i))
    if rows:
        st.caption("Right / close / wrong count each student's latest answer; the first answers are their "
                   "predictions before any feedback ('Answer again' replaces the latest, never the first).")
    else:
        st.caption("No answers yet. Each student's answers are counted here, anonymously, as they check "
                   "them.")


def where_label(pack, where: str) -> str:
    """A stored answer's fact ("<fact id>" or "<fact id> → <new target>") as the teacher reads it."""
    fid, _, target = where.partition(TARGET_SEP)
    fact = pack.fact(fid) if fid in pack.served_ids() else None
    gone = fid.rsplit("-", 1)[0].replace("-", " ")
    name = fact_label(fact) if fact else f"a fact no longer in the pack ({gone})"
    return f"{name}, edited to {target}" if target else name


def _add_cancelled() -> None:
    st.session_state[keys.ADD_CANCELLED] = True


def add_fact_form(pack) -> None:
    """The estimate, what became of the last add (added, cancelled, too late to cancel), the form and its job.
    """
    st.subheader("Add a fact")
    new = compute.Settings.for_new_facts(pack.manifest.get("settings"))
    _estimate(pack, new)
    added = st.session_state.pop(keys.ADDED, None)
    if added:
        text, profile = added if isinstance(added, tuple) else (added, [])
        st.success(text)
        if profile:
            with st.expander("Time per part"):
                st.dataframe(pd.DataFrame([{"part": p["part"], "seconds": p["seconds"],
                                            "expected seconds": p.get("expected_seconds"),
                                            "of it first-use statistics": p.get("statistics_seconds")}
                                           for p in profile]), hide_index=True, width="stretch")
    adding = st.session_state.pop(keys.ADDING, None)  # (the fact's key, the pack's facts before the job)
    if st.session_state.pop(keys.ADD_CANCELLED, False):
        _cancelled(pack, adding)
    record = _form()
    if record is not None:
        with ui.guard("adding the fact"):
            _add(pack, record, new)
            st.rerun()  # the sidebar's fact list shows it
    if packs.served_folder() == packs.class_copy():
        if st.button("Back to the shipped pack (drop the added facts; the class's answers stay)",
                     key=keys.RESET_PACK):
            packs.reset_class_copy()
            st.rerun()


def _estimate(pack, new: compute.Settings) -> None:
    """How long a fact takes here, with the first-use statistics this server still lacks and their size, and
    when students can start it (timing.estimate_fact)."""
    from editkit.lesson.timing import estimate_fact

    one, two = estimate_fact(pack, 1, new), estimate_fact(pack, 2, new)
    stats = one.statistics_words()
    first = (f", of which {duration(one.statistics_seconds)} for the model's first-use statistics (computed "
             "once on this server)") if stats else ""
    st.markdown(f"Adding a fact here takes about {duration(one.seconds)} for a fact with one new target, "
                f"{duration(two.seconds)} with two{first}. Students can open its first steps about "
                f"{duration(one.first_steps_seconds)} after the start, once its traces are computed; each later "
                "step opens as its results are computed.")
    st.caption((f"First-use statistics: {stats}. " if stats else "") + f"The parts' times: {one.how}; longer "
               "while other jobs compute. It is the same computation as `python -m editkit lesson build`, as a "
               "job on this server; if the job is cancelled the fact is withdrawn and the students are served "
               "the pack as it was.")


def _cancelled(pack, adding) -> None:
    done = [f for f in pack.fact_ids
            if adding and f not in adding[1] and pack.fact(f).get("key") == adding[0]]
    if done:  # the click came after the last part: the build had already published the fact
        st.success(f"The cancel came too late: every part of “{fact_label(pack.fact(done[0]))}” was already "
                   "computed, so it is added, and every student now sees it in the fact list.")
    else:
        st.info("Adding the fact was cancelled: the students' pack is unchanged (the fact is not in it, and "
                "students who had opened its first steps are told it was withdrawn). The parts computed so "
                "far are kept, so adding the same fact again continues where it stopped.")


def _form() -> dict | None:
    """The new fact's form; its record once submitted (checked when the job starts), else None."""
    with st.form(keys.ADD_FORM):
        c1, c2 = st.columns(2)
        prompt = c1.text_input("Prompt with {} for the subject", "{} is located in the city of",
                               key=keys.ADD_PROMPT)
        subject = c2.text_input("Subject", key=keys.ADD_SUBJECT)
        c3, c4 = st.columns(2)
        true = c3.text_input("True target (the model must predict it)", key=keys.ADD_TRUE)
        targets = c4.text_input("New targets (comma-separated)", key=keys.ADD_TARGETS)
        para = st.text_area("Paraphrase prompts (one per line)", key=keys.ADD_PARAPHRASES)
        neigh = st.text_area(NEIGHBOURS_LABEL + " (one per line)", key=keys.ADD_NEIGHBOURS,
                             help=NEIGHBOURS_HELP)
        go = st.form_submit_button("Add the fact", type="primary")
    if not go:
        return None
    news = [t.strip() for t in targets.split(",") if t.strip()]
    return {"prompt": prompt, "subject": subject, "target_true": true,
            "target_new": news[0] if news else None, "lesson_targets": news[1:],
            "paraphrase_prompts": lines(para), "neighborhood_prompts": lines(neigh)}


def _add(pack, record: dict, new: compute.Settings) -> None:
    """Build the fact into the served pack as this session's job, each part's time left shown above the
    progress bar; the success message (with each part's time) waits for the rerun."""
    from editkit.lesson.build import build
    from editkit.lesson.facts import read_facts

    if not record["target_new"]:
        raise EditkitError("give at least one new target")
    [new_fact] = read_facts([record])  # a bad record is refused before anything loads
    st.session_state[keys.ADDING] = (new_fact.key, list(pack.fact_ids))  # for a cancel's message
    clicked = time.time()
    lm = ui.get_lm(pack.model, served=True)
    folder = packs.writable_folder()
    methods = pack.manifest.get("method_names")
    table = st.empty()
    out = ui.run_job("adding a fact to the lesson", lambda progress: build(
        [record], folder, lm=lm, progress=_with_parts(progress, table, folder, new_fact.key), methods=methods,
        settings=new), on_cancel=_add_cancelled, samples=new.samples,
        memory=compute.build_ram(lm, new, methods),
        niceness=0)  # the teacher waits on it while preparing: normal priority, not starved by other work
    table.empty()
    fid = out["facts"][-1]
    fact = packs.Pack.open(folder).fact(fid)
    opened = out.get("opened", {}).get(fid, {})
    start = (time.time() - clicked) - out["seconds"]  # the model's load and the wait for a turn
    visible = f"; students could open its first steps {elapsed(start + opened['visible'])} after the click" \
        if opened.get("visible") else ""
    st.session_state[keys.ADDED] = (f"Added “{fact_label(fact)}” ({out['computed']} part(s) computed in "
                                    f"{elapsed(out['seconds'])}{visible}). Every student now sees it in the "
                                    "fact list.", out.get("profile", []))


def _with_parts(progress, table, folder, key: str):
    """The build's progress, and above it (at most once a second) each part of the new fact with its time
    left, from the fact's status (editkit/lesson/building.py)."""
    from editkit.lesson.building import find

    last = [0.0]

    def step(fraction: float, message: str) -> None:
        progress(fraction, message)
        if time.time() - last[0] >= 1:
            last[0] = time.time()
            found = find(folder, key)
            if found:
                with table.container():
                    st.markdown("**The new fact's parts** (a student can open a step once its parts are "
                                "done):")
                    st.dataframe(parts_table(found), hide_index=True, width="stretch")
    return step
