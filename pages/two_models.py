"""Causal tracing page, "Two models side by side": the fact traced above, traced on a second loaded model too, both
drawn on a relative depth axis (layer / (n_layers - 1)) so a student sees where each model recalls it."""
from __future__ import annotations

import dataclasses

import streamlit as st

from editkit.figures.tracing import depth_comparison
from editkit.tracing import Tracer, TraceResult, TraceSpec
from editkit.tracing.memory import trace_memory
from pages import ui

KINDS = {"mlp": "MLP outputs (window)", "hidden": "hidden states", "attn": "attention outputs (window)"}


def second_model_picker(first, key: str = "two_model", where=st) -> object | None:
    """A second shipped or tiny model (loaded once per server process, like the sidebar's), in the first one's dtype;
    None until one is picked. `first`: the first model or its name."""
    first = getattr(first, "name", first)
    others = [n for n in ui.pickable_models() if n != first.split("@")[0]]  # the operator's models.allowed
    name = where.selectbox("Second model", ["(none)", *others], key=key)
    if name == "(none)":
        return None
    dtype = st.session_state.get("model_dtype", "float32")
    return ui.get_lm(name, dtype=dtype)


def trace_both(lms: list, spec: TraceSpec, kind: str, progress) -> dict[str, TraceResult]:
    """One kind of trace of the same spec on each model, with this session's kept edits on each (name -> result);
    each model answers with its own top prediction unless the spec names a target."""
    out = {}
    for i, lm in enumerate(lms):
        def step(f, msg, i=i, lm=lm):
            progress((i + f) / len(lms), f"{lm.name}: {kind}")

        with ui.session(lm):
            out[lm.name] = Tracer(lm, spec).result(kind, progress=step)
    return out


def two_models_section(lm, spec: TraceSpec | None) -> None:
    """The section's inputs, its job and its figures; `spec` is the trace form's (None before a trace was asked)."""
    st.subheader("Two models side by side")
    st.markdown(
        "Trace the same fact on a second model. Models have different numbers of layers, so layers are shown at "
        "their **relative depth** l / (L − 1) (0 = first layer, 1 = last). The lines show, at each model's last "
        "subject token, the share of p(answer) a restoration brings back, (p − p\\*) / (p_clean − p\\*), "
        "so a model that is more certain of the answer does not look more localized. Before you run it: do you "
        "expect both models to recall the fact at the same relative depth?")
    c1, c2 = st.columns(2)
    with c1:
        other = second_model_picker(lm)
    kind = c2.selectbox("Kind", list(KINDS), format_func=KINDS.get, key="two_kind")
    clicked = st.button("Trace on both", key="two_go", disabled=other is None or spec is None)
    if spec is None:
        st.caption("Fill in the trace form above first (prompt and subject).")
    if clicked and other is not None and spec is not None:
        with ui.guard("two-model trace"):
            one = dataclasses.replace(spec, kinds=(kind,))
            st.session_state["two_out"] = ui.run_job(
                "two-model trace", lambda progress: trace_both([lm, other], one, kind, progress),
                memory=max(trace_memory(m, spec.prompt, spec.samples, [kind], preview=False) for m in (lm, other)),
                samples=int(spec.samples))
    out = st.session_state.get("two_out")
    if not out:
        return
    st.plotly_chart(depth_comparison({name: r.to_json() for name, r in out.items()}), width="stretch",
                    key="two_fig")
    for col, (name, r) in zip(st.columns(len(out)), out.items()):
        col.markdown(f"**{name}**: {len(r.scores[0])} layers, answer {r.answer!r} (clean p = "
                     f"{r.high_score:.3f}, corrupted p = {r.low_score:.3f})")
        col.plotly_chart(r.figure(relative=True), width="stretch", key=f"two_heat_{name}")
