"""Lesson: locate-then-edit in eleven steps for a class. Each step asks a question before it shows anything
(predict, then reveal), checks the answer, shows the result editkit computed for the fact (from a class pack:
instant, no model), explains it in a few sentences and a formula, and lets the student run the same view on
their own prompt (through the job queue). A teacher adds facts and sees the class's answers per step.

The steps are modules of pages/lesson_steps/, in order in its registry; this page draws the one picked. The
pack: $EDITKIT_LESSON, else the class's copy in the cache (a teacher added facts), else assets/lesson/."""
import streamlit as st

from editkit.core.errors import EditkitError
from editkit.lesson import background
from pages import ui
from pages.lesson_steps import keys
from pages.lesson_steps.asking import draw
from pages.lesson_steps.building import wait_for_step
from pages.lesson_steps.registry import STEPS
from pages.lesson_steps.shared import current_pack, fact_prompt
from pages.lesson_steps.sidebar import my_answers, sidebar
from pages.lesson_steps.targets import pick_target
from pages.lesson_steps.teacher import is_teacher, teacher_view


def pack_methods(pack) -> str:
    """The intro's methods: the pack's, then the registered ones it lacks (it named six above a lesson of
    four)."""
    from editkit.editing.methods import all_methods
    from editkit.evaluation.verdict import and_list

    names = pack.manifest.get("method_names") or []
    mine = [m["label"] for m in pack.manifest.get("methods", []) if m["name"] in names]
    other = [m.label for m in all_methods() if m.name not in names]
    if not mine:
        return and_list(other)
    also = f"; editkit also has {and_list(other)}, which step 8's “try your own” runs" if other else ""
    return f"this lesson: {and_list(mine)}{also}"


def _go(delta: int) -> None:
    st.session_state[keys.STEP] = min(max(st.session_state.get(keys.STEP, 1) + delta, 1), len(STEPS))


def lesson(pack, fid: str) -> None:
    """The fact, the step picker, the step picked (for a fact being built: once its parts are written) and the
    buttons to the previous and next step."""
    fact = pack.fact(fid)
    if st.session_state.get(keys.STEP, 1) == 1:
        draw(background.intro(pack_methods(pack)))
    true = fact["request"]["target_true"].strip()
    st.markdown(f"**The fact:** “{ui.md_escape(fact_prompt(fact))}” → **{ui.md_escape(true)}** "
                f"({pack.model} predicts it with p = {fact['known']['predicted'][0]['prob']:.2f}).")
    n = st.radio("Step", list(STEPS), format_func=lambda i: f"{i}", horizontal=True, key=keys.STEP)
    step = STEPS[n]
    st.header(f"Step {n}. {step.title_for(pack, fact)}")
    with ui.guard(f"step {n}"):
        target = pick_target(fid, fact) if step.targeted else None
        if fid not in pack.fact_ids and pack.missing_for(fid, n, target or 0):
            wait_for_step(fid, n, target or 0)  # a fact being built: this step's parts are still computed
        else:
            step.draw(pack, fid, fact, target)
    c1, c2, _ = st.columns([1, 1, 6])
    c1.button("← Previous", key=keys.PREV, on_click=_go, args=(-1,), disabled=n == 1)
    c2.button("Next →", key=keys.NEXT, on_click=_go, args=(1,), disabled=n == len(STEPS))


def main() -> None:
    st.title("Lesson: locate, then edit")
    try:
        pack = current_pack()
    except EditkitError as exc:
        st.error(f"No lesson pack to serve: {exc}")
        st.stop()
    fid, answers_box = sidebar(pack)
    teacher = is_teacher()
    if fid is None:
        st.info("This pack has no facts yet.")
    else:
        lesson(pack, fid)
        my_answers(answers_box)
    if teacher:
        with ui.guard("teacher view"):
            teacher_view(pack)


if __name__ == "__main__":  # Streamlit runs a page file as a script: see ui.script_run
    ui.script_run(__file__, main)
