"""Causal tracing page, "Two models side by side": the fact traced above, traced on a second loaded model too,
both drawn on a relative depth axis (layer / (n_layers - 1)) so a student sees where each model recalls it."""
from __future__ import annotations

import dataclasses

import streamlit as st

from editkit.evaluation.depth import answer_mismatches, depth_summary, peaks
from editkit.figures.tracing import depth_comparison
from editkit.model.loading import ALL_TINY
from editkit.model.text import top_k
from editkit.tracing import Tracer, TraceResult, TraceSpec
from editkit.tracing.ram import trace_ram
from pages import ui

KINDS = {"mlp": "MLP outputs (window)", "hidden": "hidden states", "attn": "attention outputs (window)"}


class K:
    """This section's session-state keys, each named once."""

    MODEL, KIND, GO, OUT, TOPS, FIG = "two_model", "two_kind", "two_go", "two_out", "two_tops", "two_fig"

    @staticmethod
    def heatmap(model: str) -> str:
        return f"two_heat_{model}"


def second_models(first: str) -> list[str]:
    """The models offered beside `first`: the real shipped ones; the random-weight tiny test models only
    beside a tiny model (a trace of random weights says nothing about where a fact is recalled)."""
    base = first.split("@")[0]
    return [n for n in ui.BUILTIN if n != base and (n not in ALL_TINY or base in ALL_TINY)]


def second_model_picker(first, key: str = K.MODEL, where=st) -> object | None:
    """A second model (loaded once per server process, like the sidebar's), in the first one's dtype; None
    until one is picked. `first`: the first model or its name. Its loading status is drawn under the picker's
    row, in a place of its own, so nothing below moves while it loads."""
    first = getattr(first, "name", first)
    allowed = ui.pickable_models()  # the operator's models.allowed
    others = [n for n in second_models(first) if n in allowed]
    name = where.selectbox("Second model", ["(none)", *others], key=key)
    if name == "(none)":
        return None
    dtype = st.session_state.get(ui.K.DTYPE, "float32")
    return ui.get_lm(name, dtype=dtype)


def trace_both(lms: list, spec: TraceSpec, kind: str, progress) -> tuple[dict[str, TraceResult], dict]:
    """One kind of trace of the same fact on each model, with this session's kept edits on each (name ->
    result), and each model's own top prediction (name -> (token, p)). The first model answers with its top
    prediction unless the spec names a target; the others trace that same answer, so both curves are about one
    fact."""
    out, tops = {}, {}
    for i, lm in enumerate(lms):
        def step(f, msg, i=i, lm=lm):
            progress((i + f) / len(lms), f"{lm.name}: {kind}")

        with ui.session(lm):
            top = top_k(lm, spec.prompt, 1)[0]
            tops[lm.name] = (top.token, top.prob)
            r = Tracer(lm, spec).result(kind, progress=step)
        out[lm.name] = r
        if spec.target is None:
            spec = dataclasses.replace(spec, target=r.answer)
    return out, tops


def two_models_section(lm, spec: TraceSpec | None, refused: str | None = None) -> None:
    """The section's inputs, its job and its figures; `spec` is the trace form's (None while it is empty, or
    `refused` says why it cannot be traced)."""
    st.subheader("Two models side by side")
    st.markdown(
        "Trace the same fact on a second model. Models have different numbers of layers, so layers are shown "
        "at their **relative depth** l / (L − 1) (0 = first layer, 1 = last). The lines show, at each "
        "model's last subject token, the share of p(answer) a restoration brings back, (p − p\\*) / (p_clean "
        "− p\\*), so a model that is more certain of the answer does not look more localized. Before you run "
        "it: do you expect both models to recall the fact at the same relative depth?")
    c1, c2 = st.columns(2)
    with c1:
        other = second_model_picker(lm)
    kind = c2.selectbox("Kind", list(KINDS), format_func=KINDS.get, key=K.KIND)
    clicked = st.button("Trace on both", key=K.GO, disabled=other is None or spec is None)
    if spec is None:
        st.caption(f"The trace form above cannot be traced: {refused}." if refused else
                   "Fill in the trace form above first (prompt and subject).")
    if clicked and other is not None and spec is not None:
        with ui.guard("two-model trace"):
            one = dataclasses.replace(spec, kinds=(kind,))
            st.session_state[K.OUT], st.session_state[K.TOPS] = ui.run_job(
                "two-model trace", lambda progress: trace_both([lm, other], one, kind, progress),
                memory=max(trace_ram(m, spec.prompt, spec.samples, [kind], preview=False)
                           for m in (lm, other)),
                samples=int(spec.samples))
    out = st.session_state.get(K.OUT)
    if not out:
        return
    runs = out  # name -> TraceResult: the summaries and the figure read typed results
    mismatches = answer_mismatches(runs, st.session_state.get(K.TOPS) or {})
    for warning in mismatches.values():
        st.warning(warning)
    st.markdown(ui.md_escape(depth_summary(runs, list(mismatches))))
    st.plotly_chart(depth_comparison(runs, peaks(runs)), width="stretch", key=K.FIG)
    for col, (name, r) in zip(st.columns(len(out)), out.items()):
        col.markdown(f"**{name}**: {len(r.scores[0])} layers, answer {r.answer!r} (clean p = "
                     f"{r.high_score:.3f}, corrupted p = {r.low_score:.3f})")
        col.plotly_chart(r.figure(relative=True), width="stretch", key=K.heatmap(name))


if __name__ == "__main__":
    ui.script_run(__file__)
