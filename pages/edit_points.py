"""Edit & compare's operating points: where each method's strength knob puts it on its shipped trade-off
(the results manifest's operating_points), a point picked with what it buys and costs, and 'Use this point' to
put its setting into the method's hyperparameter box."""
import json

import streamlit as st

from editkit.editing.defaults import load_hparams
from editkit.editing.methods import label
from pages import ui


class K:
    """These widgets' session-state keys, each named once."""

    @staticmethod
    def pick(method: str, model: str) -> str:
        return f"ec_point_{method}@{model}"

    @staticmethod
    def figure(method: str) -> str:
        return f"ec_point_fig_{method}"

    @staticmethod
    def use(method: str) -> str:
        return f"ec_point_use_{method}"


def hparams_key(method: str, model: str) -> str:
    """The key of a method's hyperparameter box on Edit & compare (one box per model)."""
    return f"ec_hp_{method}@{model}"


@st.cache_data(show_spinner=False, max_entries=32)
def shipped_points(method: str, model: str, stamp: float) -> dict | None:
    """A method's shipped trade-off on this model (the results manifest's operating_points), as JSON; built
    once per server process and manifest version (co-edit's are tabulated from its validation rows, a few
    seconds)."""
    from editkit.evaluation.manifest import operating_points

    points = operating_points(method, model)
    return None if points is None else points.to_json()


def points_of(lm, method: str):
    """A method's shipped operating points on this model, or None."""
    from editkit.core.paths import ROOT
    from editkit.evaluation.manifest import MANIFEST
    from editkit.evaluation.points import OperatingPoints

    data = shipped_points(method, lm.name, (ROOT / MANIFEST).stat().st_mtime)
    return None if data is None else OperatingPoints.from_json(data)


def use_point(lm, method: str, setting: dict) -> None:
    """Put a point's setting into the method's hyperparameter box (a button's callback: before the box is
    drawn)."""
    key = hparams_key(method, lm.name)
    try:
        current = json.loads(st.session_state.get(key) or ui.kept(key, "") or "{}")
    except ValueError:
        current = {}
    if not current:
        current = {k: v for k, v in load_hparams(method, lm).to_dict().items() if k != "source"}
    text = json.dumps({**current, **setting}, indent=1)
    st.session_state.setdefault(ui.K.KEPT, {})[key] = text
    st.session_state[key] = text  # set through the API: the browser shows the new text (a popped key did not)


def one_point_view(lm, method: str, points) -> None:
    """One method's measured points: the figure with today's default marked, a pick, what each buys and
    costs."""
    labels = [p.label + (" (today's default)" if p.default else "") for p in points.points]
    default = next((i for i, p in enumerate(points.points) if p.default), 0)
    i = st.selectbox(f"{label(method)}: a point of its trade-off", range(len(labels)), index=default,
                     format_func=labels.__getitem__, key=K.pick(method, lm.name))
    st.plotly_chart(points.figure(i), width="stretch", key=K.figure(method))
    st.markdown(points.sentence() if i == default else points.picked(i))
    st.button("Use this point in the next run", key=K.use(method), disabled=points.points[i].default,
              on_click=use_point, args=(lm, method, points.points[i].setting))
    st.caption(f"Measured on {points.source}." + "".join(f" {n}." for n in points.notes if n))


def points_section(lm, methods: list[str]) -> None:
    """Each chosen method whose strength knob has a shipped trade-off, side by side."""
    shown = [(m, points_of(lm, m)) for m in methods]
    shown = [(m, p) for m, p in shown if p is not None]
    if not shown:
        return
    with st.expander("Operating points: the trade-off each method's strength knob was chosen from"):
        st.markdown(
            "A knob that makes an edit stronger also moves more of what it should leave alone: UltraEdit's "
            "learning rate buys efficacy (P(new) > P(true) on the rewrite) with neighbours kept "
            "(neighbourhood prompts the unedited model got right that stay right); co-edit's kept relations "
            "buy back the subject's other facts (relation specificity) with implied facts moved (logical "
            "generalization); MEMIT's norm constraint λ_n‖ΔW‖² (ENCORE) is a stabiliser for long sequences "
            "of edits. Each point is one setting measured on validation records; the star is today's "
            "default. Pick a point to see what it buys and costs, and use it for your next run.")
        for row in range(0, len(shown), 2):  # two to a row: a third of the page overlapped legend and axis
            for col, (m, points) in zip(st.columns(2), shown[row:row + 2]):
                with col:
                    one_point_view(lm, m, points)


if __name__ == "__main__":  # Streamlit's legacy pages/ mode serves this file at a URL too: see ui.script_run
    ui.script_run(__file__)
