"""Step 11: ripple effects. Which of the facts an edit implies follow it, and which stay as they should?"""
from __future__ import annotations

import streamlit as st

from editkit.lesson import compute, grading
from editkit.lesson import pack as packs
from pages import ui
from pages.lesson_steps import keys
from pages.lesson_steps.asking import ask, explain, own_request, try_own
from pages.lesson_steps.shared import chart, needs
from pages.lesson_steps.step import Step


def draw(pack, fid: str, fact: dict, t: int | None = 0) -> None:
    t = t or 0  # the new target picked above the step
    out = needs(pack, fid, packs.ripple_name(t), "ripple effects for this target")
    rows = grading.ripple_rows(out) if out else []
    if out and not rows:
        st.info(no_rows(out))
    elif out:
        _question(pack, fid, fact, t, grading.ripple_asked(out), rows)
    explain(
        "An edit (s, r, o → o*) implies more than its own prompt: composed with what the model knows about "
        "o* (o* lies in country z*) it says s lies in z*; another name of s should follow; s's other facts "
        "and o's own facts should stay. editkit derives these from the model's own answers and keeps those "
        "it knows. RippleEdits and MQuAKE found that weight edits pass the edited prompt and fail most "
        "implied facts, while writing the new fact in the prompt (the in-context reference) propagates "
        "better.",
        [r"(s, r, o^*) \wedge (o^*, r_2, z^*) \Rightarrow (s,\ r \circ r_2,\ z^*)"], ["references"])
    try_own(11, "ripple effects of a ROME edit of your own fact", lambda: own_request(11, fact),
            lambda lm, progress, rec: compute.ripple(lm, rec, progress=progress), show_ripple_own)


def _question(pack, fid: str, fact: dict, t: int, out: dict, rows: list[dict]) -> None:
    from editkit.figures.ripple import ripple_figure

    new = out["request"]["target_new"].strip()
    label = {r["prompt"]: f"{r['prompt']} {'→' if r['move'] else '='} {r['answer'].strip()}" for r in rows}

    def show(done):
        chart(st, lambda: ripple_figure(out), f"ripple_{t}", out)
        st.markdown(f"**{ui.md_escape(grading.ripple_conclusion(out))}**")

    q = keys.question(11, fid, t)
    ask(pack, fid, 11, f"ROME makes {fact['request']['subject']!r} recall {new!r}. After the edit, "
                       "which prompts give their expected answer (→: the edit should move it there; =: "
                       "it should stay)?",
        lambda: st.multiselect("They will give their expected answer", list(label), format_func=label.get,
                               key=q),
        lambda chosen: grading.grade_ripple(out, chosen or []), show, target=t, inputs=[q])


def show_ripple_own(out: dict) -> None:
    """A student's own ripple result: the grid and its conclusion, or why no implied fact could be tested."""
    from editkit.figures.ripple import ripple_figure

    if not grading.ripple_rows(out):
        st.info(no_rows(out))
        return
    chart(st, lambda: ripple_figure(grading.ripple_asked(out)), "ripple_own", None)
    st.markdown(f"**{ui.md_escape(grading.ripple_conclusion(out))}**")


def no_rows(out: dict) -> str:
    """Why a ripple result has no question: nothing derived (its message), or no derived fact whose state
    before the edit fits its question (grading.ripple_asked)."""
    if not out.get("facts"):
        return out["message"]
    return ("No implied fact to ask about: none that should stay was the model's top answer before the edit, "
            "and none that should move had another answer before it.")


def heading(pack, fact: dict) -> str | None:
    """Names the fact's subject (the generic title named the Eiffel Tower above every fact)."""
    subject = (fact.get("request") or {}).get("subject")
    if not subject:
        return None
    subject = "the" + subject[3:] if subject.startswith("The ") else subject
    return f"Which of {ui.md_escape(subject)}'s facts follow the edit? Ripple effects"


STEP = Step(11, "Ripple effects: which facts follow the edit?", draw, heading)
