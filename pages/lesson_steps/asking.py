"""Asking, checking, revealing: every step asks its question before it shows anything (predict, then reveal),
grades the answer, keeps it for the student and counts it for the class, explains the result in a few
sentences and a formula, and lets the student run the same view on an input of their own (through the job
queue)."""
from __future__ import annotations

import streamlit as st

from editkit.core.errors import EditkitError
from editkit.editing.requests import NEIGHBOURS_HELP, NEIGHBOURS_LABEL
from editkit.lesson import background, classroom, compute
from pages import ui
from pages.lesson_steps import keys
from pages.lesson_steps.shared import (
    answers,
    class_store,
    current_pack,
    fact_label,
    lesson_id,
    lines,
    settings,
)

FEEDBACK = {"right": st.success, "close": st.info, "wrong": st.warning}
TARGET_SEP = " → "  # a stored answer of steps 5-8: "<fact id> → <new target>"


def ask(pack, fid: str, n: int, question: str, widgets, grade, show, target: int | None = None, above=None,
        inputs=()) -> dict | None:
    """The question of step n (its inputs drawn by `widgets()` inside a form, which returns the answer); on
    "Check my answer" the answer is graded (`grade(answer)` -> Grade), kept in the session and counted for the
    class, and `show(done)` draws the result. `target`: the new target the step is about (steps 5-8).
    `above()` draws what the student clicks before the reveal (the empty grid), gone with the form. `inputs`:
    the session keys of the answer's inputs, cleared by "Answer again" so that nothing shows an old pick.
    Returns the stored answer once the step is revealed, else None.

    Everything after the question sits in one container: the step's explanation and "try your own" below keep
    their place in the page whatever the reveal adds (an element whose place changes is drawn anew, and an
    open expander drawn anew is closed)."""
    key = keys.answer(fid, n, target)
    st.markdown(f"**Your prediction first.** {question}")
    with st.container():
        done = answers().get(key)
        if done is None:
            done = _question_form(pack, fid, n, question, widgets, grade, target, above)
        if done is None:
            return None
        _feedback(done["grade"])
        st.button("Answer again", key=keys.again(n, fid), on_click=answer_again, args=(key, inputs))
        show(done)
    return done


def _question_form(pack, fid: str, n: int, question: str, widgets, grade, target, above) -> dict | None:
    """The form (and what sits above it) until the answer is in: the answer checked or skipped, else None."""
    done = None
    box = st.empty()  # the grid and the form go once the answer is in
    with box.container():
        if above is not None:
            above()
        with st.form(keys.form(n, fid)):
            answer = widgets()
            c1, c2 = st.columns([1, 3])
            check = c1.form_submit_button("Check my answer", type="primary")
            skip = c2.form_submit_button("Skip: just show me")
    if check:
        with ui.guard():  # "pick a cell first" and the like, as they are
            done = record(pack, fid, n, question, grade(answer).to_dict(), answer, target)
    elif skip:
        done = answers()[keys.answer(fid, n, target)] = {"grade": None, "row": None}
    if done is not None:
        box.empty()
    return done


def _feedback(g: dict | None) -> None:
    if g is None:
        st.caption("Skipped: the result is shown without a prediction.")
    else:
        FEEDBACK[g["verdict"]](f"**{g['verdict'].capitalize()}** (your answer: {ui.md_escape(g['choice'])}). "
                               f"{ui.md_escape(g['feedback'])}")


def record(pack, fid: str, n: int, question: str, g: dict, answer, target: int | None) -> dict:
    """Keep a graded answer in the session and count it for the class."""
    row = classroom.answer_row(fact_label(pack.fact(fid)), n, question, g)
    done = {"grade": g, "row": row, "answer": answer}
    answers()[keys.answer(fid, n, target)] = done
    try:
        where = fid if target is None else f"{fid}{TARGET_SEP}{pack.fact(fid)['targets'][target].strip()}"
        class_store().record(lesson_id(pack), where, str(n), ui.session_id(), g["choice"], g["verdict"],
                             g["score"])
    except Exception:  # noqa: BLE001 - the class view is optional; the student's own answer stays
        ui.log.warning("could not record an answer for the class view", exc_info=True)
    return done


def answer_again(key: str, inputs) -> None:
    """"Answer again": the answer and every input of it go (a pick left in the grid but not in the form was
    graded as token 0, layer 0)."""
    answers().pop(key, None)
    for k in inputs:
        st.session_state.pop(k, None)


def explain(text: str, formulas=(), sections=()) -> None:
    """Two or three sentences, the formula(s), and the reference text of the former Learn page."""
    st.markdown(text)
    for f in formulas:
        st.latex(f)
    for name in sections:
        title = background.title(name)  # the references section is "References", not "Reference: References"
        with st.expander(title if title.lower().startswith("reference") else f"Reference: {title}"):
            draw(background.body(name))


def draw(blocks) -> None:
    """Reference text (editkit/lesson/background.py): titles, paragraphs and formulas."""
    for kind, text in blocks:
        {"title": st.subheader, "text": st.markdown, "latex": st.latex}[kind](text)


def try_own(n: int, what: str, inputs, run, show, **caps) -> None:
    """The same view live on the student's input: `inputs()` draws the inputs and returns them (or None),
    `run(lm, progress, value)` computes as a job in the server's queue, `show(result)` draws it."""
    with st.expander(f"Try your own: {what}"):
        value = inputs()
        if st.button("Run it", key=keys.own_go(n), disabled=value is None):
            with ui.guard(what):
                pack = current_pack()
                lm = ui.get_lm(pack.model, served=True)
                limit = {k: v(value) if callable(v) else v for k, v in caps.items()}
                st.session_state[keys.own_result(n)] = ui.run_job(
                    f"lesson step {n}", lambda progress: run(lm, progress, value),
                    memory=compute.own_ram(lm, n, settings(pack)), **limit)
        ui.cancelled_note()
        result = st.session_state.get(keys.own_result(n))
        if result is not None:
            with ui.guard(what):
                show(result)


def own_request(n: int, fact: dict, neighbours: bool = False):
    """Inputs of a request of the student's own (prefilled with the fact's); the EvalRecord, or None."""
    r = fact["request"]
    c1, c2 = st.columns(2)
    prompt = c1.text_input("Prompt with {} for the subject", r["prompt"], key=keys.own(n, "prompt"))
    subject = c2.text_input("Subject", r["subject"], key=keys.own(n, "subject"))
    c3, c4 = st.columns(2)
    true = c3.text_input("True target (what the model says now)", r["target_true"].strip(),
                         key=keys.own(n, "true"))
    new = c4.text_input("New target", fact["targets"][0].strip(), key=keys.own(n, "new"))
    extra = ""
    if neighbours:
        extra = st.text_area(NEIGHBOURS_LABEL + " (one per line)", "\n".join(r["neighborhood_prompts"][:3]),
                             key=keys.own(n, "neigh"), help=NEIGHBOURS_HELP)
    try:
        return compute.record_of({"prompt": prompt, "subject": subject, "target_true": true,
                                  "target_new": new, "neighborhood_prompts": lines(extra)})
    except EditkitError as exc:
        st.caption(f"⚠ {exc}")
        return None


def chosen(c) -> int:
    """A radio's index, or "choose an answer first"."""
    if c is None:
        raise EditkitError("choose an answer first")
    return int(c)


def picked(c):
    """A radio's value, or "choose an answer first"."""
    if c is None:
        raise EditkitError("choose an answer first")
    return c
