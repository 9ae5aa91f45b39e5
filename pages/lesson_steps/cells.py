"""The trace steps' shared pieces (steps 2, 3 and 6): the empty grid a student clicks before the reveal, the
token and layer inputs the click fills, the grade of a picked cell, and the inputs of a trace of one's own."""
from __future__ import annotations

import streamlit as st

from editkit.core.errors import EditkitError
from editkit.figures import lesson as figs
from editkit.lesson import compute, grading
from pages.lesson_steps import keys
from pages.lesson_steps.shared import fact_prompt, settings
from pages.two_models import second_model_picker


def pick_cell(fid: str, n: int, trace: dict, title: str):
    """The empty grid the student clicks before the reveal (drawn by `ask` above the form; the click fills the
    token and layer inputs) -> (draw the grid, the form's widgets, the session keys of the pick)."""
    tkey, lkey, gkey = keys.cell(n, fid)  # the form's inputs, the grid

    def clicked():
        points = (st.session_state.get(gkey) or {}).get("selection", {}).get("points", [])
        if points and points[0].get("customdata"):
            st.session_state[tkey], st.session_state[lkey] = (int(v) for v in points[0]["customdata"][:2])

    def grid():
        chosen = (st.session_state.get(tkey), st.session_state.get(lkey))
        st.plotly_chart(figs.pick_grid(trace, chosen if None not in chosen else None, title), width="stretch",
                        key=gkey, on_select=clicked, selection_mode="points")

    widgets = cell_widgets(tkey, lkey, figs.token_labels(trace), len(trace["scores"][0]))
    return grid, widgets, (tkey, lkey, gkey)


def picked_cell(done: dict):
    """The student's (token, layer), when they answered (not skipped)."""
    cell = done.get("answer") if done.get("grade") else None
    return tuple(int(v) for v in cell) if cell and None not in cell else None


def cell_widgets(tkey: str, lkey: str, labels: list[str], n_layers: int):
    def widgets():
        c1, c2 = st.columns(2)
        # no default when a click already set the value (Streamlit warns about both)
        first = {} if tkey in st.session_state else {"index": None}
        token = c1.selectbox("Token", range(len(labels)), format_func=lambda i: labels[i], key=tkey,
                             placeholder="pick a token", **first)
        first = {} if lkey in st.session_state else {"value": None}
        layer = c2.number_input("Layer", 0, n_layers - 1, key=lkey, placeholder="pick a layer", **first)
        return token, layer
    return widgets


def grade_pick(trace):
    def grade(answer):
        token, layer = answer
        if token is None or layer is None:
            raise EditkitError("pick a cell first: a token and a layer (click the grid or use the inputs)")
        return grading.grade_cell(trace, int(token), int(layer))
    return grade


def trace_inputs(n: int, fact: dict, pack, second: bool = False):
    """(prompt, subject, settings) of the student's trace, plus with `second` the second model picked (or
    None)."""
    c1, c2, c3 = st.columns([3, 2, 1])
    prompt = c1.text_input("Prompt", fact_prompt(fact), key=keys.own(n, "tprompt"))
    subject = c2.text_input("Subject (in the prompt)", fact["request"]["subject"],
                            key=keys.own(n, "tsubject"))
    samples = c3.number_input("Noise samples", 1, 50, min(5, settings(pack).samples),
                              key=keys.own(n, "samples"))
    other = second_model_picker(pack.model, key=keys.own(n, "model")) if second else None
    if not prompt.strip() or not subject.strip():
        return None
    s = settings(pack)
    out = prompt, subject, compute.Settings(**{**s.to_dict(), "samples": int(samples)})
    return (*out, other) if second else out
