"""Causal tracing page: ROME's three heatmaps, severing, and the average indirect effect."""
import json

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from editkit.text import guess_subject
from editkit.tracing import parse_noise, prepare, trace_setup
from editkit.tracing.aie import CLASSES, average_indirect_effect
from editkit.tracing.severing import sever
from pages import ui

COLORS = {"hidden": "Purples", "mlp": "Greens", "attn": "Reds"}
TITLES = {"hidden": "single restored hidden state", "mlp": "restored MLP outputs (window)",
          "attn": "restored attention outputs (window)"}

st.title("Causal tracing")
st.markdown(
    "Where does the model recall a fact? We run the prompt once cleanly, then several times with Gaussian noise "
    "added to the subject's token embeddings, which usually destroys the answer. Restoring a single internal state "
    "to its clean value shows how much of the answer that state carries (Meng et al. 2022):"
)
st.latex(r"\mathrm{IE}(h_i^{(l)}) = P_{*,\,\text{clean } h_i^{(l)}}[o] - P_*[o], \qquad "
         r"x_{\text{subject}} \leftarrow x_{\text{subject}} + \epsilon,\ \epsilon \sim \mathcal{N}(0, (3\sigma)^2)")
lm = ui.model_picker()
if lm is None:
    st.stop()

with st.form("trace_form"):
    prompt = st.text_input("Prompt", value="The Space Needle is in downtown", key="trace_prompt")
    subject = st.text_input("Subject (a substring of the prompt; guessed if empty)", key="trace_subject",
                            value=st.session_state.get("trace_subject", "Space Needle"))
    target = st.text_input("Target token (optional; default: the model's top prediction)", key="trace_target")
    c1, c2, c3, c4 = st.columns(4)
    samples = c1.number_input("Noise samples n", 1, 100, 10, key="trace_samples")
    noise = c2.text_input("Noise ('3s' = 3 sigma, or absolute)", "3s", key="trace_noise")
    window = c3.number_input("Window (MLP/attn)", 1, 40, 10, key="trace_window")
    seed = c4.number_input("Seed", 0, 10_000, 1, key="trace_seed")
    c5, c6, c7 = st.columns(3)
    kinds = c5.multiselect("Kinds", ["hidden", "mlp", "attn"], ["hidden", "mlp", "attn"], key="trace_kinds")
    uniform = c6.checkbox("Uniform noise", key="trace_uniform")
    replace = c7.checkbox("Replace instead of add", key="trace_replace")
    submitted = st.form_submit_button("Trace", type="primary")

ui.cancelled_note()
if submitted:
    with ui.guard("tracing"):
        subj = subject.strip() or guess_subject(prompt)
        spec = parse_noise(noise, uniform=uniform, replace=replace)

        def job(progress):
            with ui.session(lm):
                progress(0.0, "clean and corrupted runs")
                setup = prepare(lm, prompt, subj, target.strip() or None, int(samples), spec, int(seed))
                results = trace_setup(lm, setup, kinds=kinds or "all", window=int(window),
                                      progress=lambda f, msg: progress(0.95 * f, msg))
                progress(0.95, "severing")
                return results, sever(lm, setup)

        results, severed = ui.run_job("causal trace", job, samples=int(samples))
        st.session_state["trace_results"] = {k: r.to_dict() for k, r in results.items()}
        st.session_state["trace_sever"] = severed


def heatmap(r: dict) -> go.Figure:
    b, e = r["subject_range"]
    labels = [f"{t!r}{'*' if b <= i < e else ''}" for i, t in enumerate(r["tokens"])]
    labels = [f"{i}: {s}" for i, s in enumerate(labels)]
    ie = r["indirect_effect"]
    fig = go.Figure(go.Heatmap(
        z=r["scores"], x=list(range(len(r["scores"][0]))), y=labels, colorscale=COLORS[r["kind"]],
        zmin=r["low_score"], customdata=ie, colorbar={"title": f"p({r['answer']!r})"},
        hovertemplate="token %{y}<br>layer %{x}<br>p = %{z:.3f}<br>IE = %{customdata:.3f}<extra></extra>",
    ))
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(title=f"{TITLES[r['kind']]}" + (f", window {r['window']}" if r["kind"] != "hidden" else ""),
                      xaxis_title="layer", height=140 + 28 * len(labels), margin={"t": 40, "b": 40})
    return fig


results = st.session_state.get("trace_results")
if results:
    first = next(iter(results.values()))
    st.write(f"Answer **{first['answer']!r}**: clean p = {first['high_score']:.3f}, corrupted p = "
             f"{first['low_score']:.3f} (noise scale {first['noise_scale']:.3f}; `*` marks subject tokens).")
    cols = st.columns(len(results))
    for col, (kind, r) in zip(cols, results.items()):
        with col:
            st.plotly_chart(heatmap(r), width="stretch", key=f"trace_fig_{kind}")
            t, l = max(((t, l) for t in range(len(r["scores"])) for l in range(len(r["scores"][0]))),
                       key=lambda x: r["scores"][x[0]][x[1]])
            st.caption(f"Peak: {r['tokens'][t]!r} at layer {l}, p = {r['scores'][t][l]:.3f} "
                       f"(IE {r['indirect_effect'][t][l]:+.3f}).")
    rows = [{"kind": k, "token_index": t, "token": r["tokens"][t], "layer": l, "p": r["scores"][t][l],
             "indirect_effect": r["indirect_effect"][t][l]}
            for k, r in results.items() for t in range(len(r["tokens"])) for l in range(len(r["scores"][0]))]
    d1, d2 = st.columns(2)
    d1.download_button("Download CSV", pd.DataFrame(rows).to_csv(index=False), "trace.csv", "text/csv",
                       key="trace_csv")
    d2.download_button("Download JSON", json.dumps(results, indent=1), "trace.json", "application/json",
                       key="trace_json")
    st.caption("PNG: use the camera icon in each chart's toolbar.")

    sev = st.session_state.get("trace_sever")
    if sev:
        st.subheader("Severing: which later modules does a restored state need?")
        st.markdown(
            f"Restore the hidden state at {sev['token_str']!r} (the last subject token) at layer l, while the MLP "
            "(or attention) outputs at that token stay at their corrupted values in all later layers. A drop of "
            "the green curve means the later MLPs at that token do the decisive work (ROME, Fig. 4)."
        )
        fig = go.Figure()
        for key, name, color in (("none", "no severing", "purple"), ("mlp", "MLPs severed", "green"),
                                 ("attn", "attention severed", "red")):
            fig.add_trace(go.Scatter(x=sev["layers"], y=sev[key], name=name, line={"color": color}))
        fig.add_hline(y=sev["low_score"], line_dash="dot", annotation_text="corrupted")
        fig.update_layout(xaxis_title="layer of the restored hidden state", yaxis_title="p(answer)", height=350)
        st.plotly_chart(fig, width="stretch", key="trace_sever_fig")

st.subheader("Average indirect effect over known facts")
st.markdown(
    "The same traces averaged over facts the model itself predicts (from ROME's known facts), by token class, "
    "with 95% bands: mean ± 1.96·sd/√N. ROME finds a strong MLP effect at the last subject token in early-to-middle "
    "layers and a late attention effect at the last token."
)
n_facts = st.number_input("Facts", 5, 500, 30, key="trace_aie_n")
if st.button("Compute / show average effects", key="trace_aie_go"):
    with ui.guard("average indirect effect"):
        def aie_job(progress):
            with ui.session(lm):
                return average_indirect_effect(lm, int(n_facts), progress=progress)

        st.session_state["trace_aie"] = ui.run_job("average indirect effect", aie_job, facts=int(n_facts))
aie = st.session_state.get("trace_aie")
if aie:
    cols = st.columns(3)
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    for col, kind in zip(cols, ("hidden", "mlp", "attn")):
        fig = go.Figure()
        layers = list(range(aie["layers"]))
        for c, color in zip(CLASSES, palette):
            s = aie["kinds"][kind].get(c)
            if not s:
                continue
            fig.add_trace(go.Scatter(x=layers + layers[::-1], y=s["high"] + s["low"][::-1], fill="toself",
                                     fillcolor=color, opacity=0.15, line={"width": 0}, showlegend=False,
                                     hoverinfo="skip"))
            fig.add_trace(go.Scatter(x=layers, y=s["mean"], name=c, line={"color": color}))
        fig.update_layout(title=f"AIE, {kind} (N = {aie['n_facts']})", xaxis_title="layer", height=380)
        col.plotly_chart(fig, width="stretch", key=f"trace_aie_{kind}")


# ---- does the traced layer edit best? (issue 15) ------------------------------------------------------------------
def layer_sweep_section(lm) -> None:
    """ROME at every layer for the traced fact, on the trace's layer axis (Hase et al. 2023)."""
    from editkit.editing.requests import EditRequest
    from editkit.errors import EditkitError
    from editkit.evaluation.charts import layer_sweep_figure
    from editkit.evaluation.layer_sweep import layer_sweep

    st.subheader("Does the traced layer edit best? Edit every layer")
    st.markdown(
        "ROME edits the layer where the trace finds the MLP effect at the subject's last token. Hase et al. (2023) "
        "edited every layer instead and found that how well an edit works barely depends on where tracing "
        "localizes the fact. Here the traced fact is rewritten with ROME at each layer: the lower chart shows, on "
        "the trace's layer axis, P(new) − P(true) on the prompt and a paraphrase (higher = the edit works) and "
        "P(true) − P(new) on other subjects (higher = nothing leaked); the dashed line is the trace's peak.")
    st.latex(r"\text{rewrite score} = \frac{P_{\text{post}}(o^*) - P_{\text{pre}}(o^*)}{1 - P_{\text{pre}}(o^*)}")
    prompt = st.session_state.get("trace_prompt", "")
    subject = (st.session_state.get("trace_subject") or "").strip()
    results = st.session_state.get("trace_results") or {}
    traced = next((results[k] for k in ("mlp", "hidden", "attn") if k in results), None)
    c1, c2 = st.columns(2)
    new = c1.text_input("New target", "Paris", key="ls_new")
    true = c2.text_input("True target (empty: the answer of the trace above)", key="ls_true").strip() or \
        (traced or {}).get("answer", "").strip()
    c3, c4 = st.columns(2)
    para = c3.text_input("A paraphrase of the prompt (optional)", key="ls_para")
    neigh = c4.text_input("A prompt about another subject, same relation (optional)", key="ls_neigh")
    layers = st.multiselect("Layers to edit", list(range(lm.adapter.n_layers)), list(range(lm.adapter.n_layers)),
                            key="ls_layers")
    st.caption("One ROME edit per layer (about 10 s each for Gemma 3 270M on 2 idle cores).")
    if st.button("Edit every layer", key="ls_go", disabled=not (prompt and subject and layers)):
        with ui.guard("layer sweep"):
            if subject not in prompt:
                raise EditkitError(f"the subject {subject!r} is not in the prompt")
            request = EditRequest(prompt.replace(subject, "{}", 1), subject, new, true or None,
                                  [para] if para.strip() else [], [neigh] if neigh.strip() else [])
            same = traced and traced.get("meta", {}).get("prompt") == prompt and \
                traced["answer"].strip() == (true or "").strip()
            use = traced if same else None  # the trace above, when it is of this prompt and answer
            samples = int(st.session_state.get("trace_samples", 10))

            def sweep_job(progress):
                with ui.session(lm):
                    return layer_sweep(lm, request, layers, trace_kind="mlp", samples=samples, trace_result=use,
                                       progress=progress)

            st.session_state["ls_out"] = ui.run_job("layer sweep", sweep_job, samples=samples)
    out = st.session_state.get("ls_out")
    if out:
        st.plotly_chart(layer_sweep_figure(out), width="stretch", key="ls_fig")
        t = out["trace"]
        st.caption(f"Best layer by the summed differences: {out['best_layer']}"
                   + (f"; the {t['kind']} trace at {t['token']!r} peaks at layer {t['peak_layer']}." if t else "."))


layer_sweep_section(lm)
