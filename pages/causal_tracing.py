"""Causal tracing page: a preview at once, ROME's three exact heatmaps as they are computed, severing, and the
average indirect effect."""
import json

import streamlit as st

from editkit.core.errors import EditkitError
from editkit.editing.requests import NEIGHBOURS_HELP
from editkit.figures.tracing import aie_depth
from editkit.model.hardware import slow_bf16_note
from editkit.model.tokens import guess_subject
from editkit.runtime.cluster import Item, backend_from_env
from editkit.tracing import Tracer, TraceResult, Traces, TraceSpec, parse_noise
from editkit.tracing.aie import average_indirect_effect, shipped_runs
from editkit.tracing.bench import fast_note
from editkit.tracing.ram import aie_ram, trace_ram
from editkit.tracing.tracer import exact_panels
from pages import ui
from pages.two_models import two_models_section

ui.leave_legacy_multipage_mode()

st.title("Causal tracing")
st.markdown(
    "Where does the model recall a fact? We run the prompt once cleanly, then several times with Gaussian noise "
    "added to the subject's token embeddings, which usually destroys the answer. Restoring a single internal state "
    "to its clean value shows how much of the answer that state carries (Meng et al. 2022):"
)
st.latex(r"\mathrm{IE}(h_i^{(l)}) = P_{*,\,\text{clean } h_i^{(l)}}[o] - P_*[o], \qquad "
         r"x_{\text{subject}} \leftarrow x_{\text{subject}} + \epsilon,\ \epsilon \sim \mathcal{N}(0, (3\sigma)^2)")
with st.expander("What each view shows"):
    st.markdown(
        "**Preview (estimate).** Attribution patching replaces each restoration by its first-order Taylor term, "
        "$\\mathrm{IE} \\approx (a_{\\text{clean}} - a_*) \\cdot \\partial P_*[o] / \\partial a$, with the gradient "
        "taken in the corrupted run. One backward pass gives every cell at once, so it appears immediately; "
        "it is linear, so it misses effects that only appear after a large change (a saturated softmax), and it is "
        "drawn in grey until the exact panel replaces it.\n\n"
        "**Hidden states.** Cell (i, l) copies the clean residual-stream vector $h_i^{(l)}$ (token i after layer l) "
        "into each corrupted run and lets the rest of the network run: its colour is $P_{*,\\,\\text{clean } "
        "h_i^{(l)}}[o]$. A bright cell is a state that carries the fact.\n\n"
        "**MLP / attention.** Cell (i, l) restores the MLP (or attention) outputs at token i in the window of "
        "layers $[l - w/2,\\ l + w/2)$ together (one module adds little on its own). ROME finds the MLPs at the "
        "subject's last token in middle layers, and attention at the last token in late layers.\n\n"
        "**Severing.** Restore $h_i^{(l)}$ at the subject's last token while the MLP (or attention) outputs at that "
        "token stay at their corrupted values in every later layer: if the effect collapses, the later MLPs did "
        "the work.\n\n"
        "**Average indirect effect.** The same effects averaged over facts the model knows, per token class, with "
        "a 95% band $\\bar x \\pm 1.96\\, s / \\sqrt{N}$."
    )
lm = ui.model_picker()
if lm is None:
    st.stop()

with st.form("trace_form"):
    prompt = st.text_input("Prompt", value=ui.kept("trace_prompt", "The Space Needle is in downtown"),
                           key="trace_prompt")
    subject = st.text_input("Subject (a substring of the prompt; guessed if empty)", key="trace_subject",
                            value=ui.kept("trace_subject", "Space Needle"))
    target = st.text_input("Target token (optional; default: the model's top prediction)", key="trace_target",
                           value=ui.kept("trace_target", ""))
    c1, c2, c3, c4 = st.columns(4)
    samples = c1.number_input("Noise samples n", 1, 100, ui.kept("trace_samples", 10), key="trace_samples")
    noise = c2.text_input("Noise ('3s' = 3 sigma, or absolute)", ui.kept("trace_noise", "3s"), key="trace_noise")
    window = c3.number_input("Window (MLP/attn)", 1, 40, ui.kept("trace_window", 10), key="trace_window")
    seed = c4.number_input("Seed", 0, 10_000, ui.kept("trace_seed", 1), key="trace_seed")
    c5, c6, c7, c8 = st.columns([1.7, 0.8, 1.1, 1.4])  # a quarter of the form clipped the third kind's chip
    kinds = c5.multiselect("Kinds", ["hidden", "mlp", "attn"], ui.kept("trace_kinds", ["hidden", "mlp", "attn"]),
                           key="trace_kinds")
    uniform = c6.checkbox("Uniform noise", ui.kept("trace_uniform", False), key="trace_uniform")
    replace = c7.checkbox("Replace instead of add", ui.kept("trace_replace", False), key="trace_replace")
    recompute = c8.checkbox("Recompute (ignore the cache)", key="trace_no_cache")
    slow_bf16 = slow_bf16_note(lm.device)  # no fast bf16 matmuls here (an AVX2-only CPU): the exact engine is faster
    fast = st.checkbox("Fast mode: bf16 matmuls in the restored runs (faster; an approximation)",
                       key="trace_fast", help=slow_bf16 or fast_note(lm.name), disabled=bool(slow_bf16))
    fast = fast and not slow_bf16
    if slow_bf16:
        st.caption(slow_bf16)
    submitted = st.form_submit_button("Trace", type="primary")
ui.keep("trace_prompt", "trace_subject", "trace_target", "trace_samples", "trace_noise", "trace_window", "trace_seed",
        "trace_kinds", "trace_uniform", "trace_replace")
failure = st.empty()  # a failed trace says so here, under the form, not below the earlier heatmaps


class Panels:
    """One slot per kind (chart, caption, progress bar) and one for severing, filled as results arrive."""

    def __init__(self, kinds):
        self.kinds = list(kinds)
        self.header = st.empty()
        cols = st.columns(len(self.kinds)) if self.kinds else []
        self.slots = {k: (col.empty(), col.empty(), col.empty()) for k, col in zip(self.kinds, cols)}
        self.drawn = set()

    def draw(self, kind: str, r: TraceResult) -> None:
        stage = "preview" if r.estimate else "exact"
        if (kind, stage) in self.drawn or kind not in self.slots:
            return
        self.drawn.add((kind, stage))
        chart, caption, _ = self.slots[kind]
        chart.plotly_chart(r.figure(), width="stretch", key=f"trace_fig_{kind}_{stage}")
        if stage == "preview":
            caption.caption("Estimate (attribution patching); the exact panel replaces it when computed.")
        else:
            t, l, p = r.peak()
            source = "from the cache" if r.cached else f"{r.seconds:.1f} s"
            how = f"{fast_note(r.meta.get('model', ''))} " if r.approximation else "exact, "
            caption.caption(f"Peak: {r.tokens[t]!r} at layer {l}, p = {p:.3f} "
                            f"(IE {p - r.low_score:+.3f}); {how}{source}.")

    def bar(self, kind: str):
        return self.slots[kind][2].progress(0.0, text=f"exact {kind} panel: waiting")


def _cancel():
    st.session_state["trace_cancelled"] = True


state = st.session_state.setdefault("trace_state", {"exact": {}, "preview": {}, "sever": None})
kinds = kinds or ["hidden", "mlp", "attn"]
if submitted:
    st.session_state["trace_cancelled"] = False
elif st.session_state.get("trace_cancelled"):
    st.warning("Trace cancelled. The panels computed before the cancel are kept; press Trace to run it again.")
ui.cancelled_note()
known = [k for k in ("hidden", "mlp", "attn") if k in state["exact"] or k in state["preview"]]
shown = kinds if submitted else known
panels = Panels(shown)


def trace_job(progress, tracer, kinds, panels) -> None:
    """The preview at once, then each exact panel as it is computed, then severing; results land in the session
    state as they arrive, so a cancelled trace keeps what it computed. The "computing" note goes however the job
    ends (done, failed or cancelled)."""
    try:
        _trace_job(progress, tracer, kinds, panels)
    finally:
        panels.header.empty()


def _trace_job(progress, tracer, kinds, panels) -> None:
    new = {"exact": {}, "preview": {}, "sever": None}
    if any(tracer.cached(k) is None for k in kinds):
        panels.header.info("Preview: attribution-patching estimates; computing the exact panels...")
        progress(0.0, "preview (attribution patching)")
        new["preview"] = dict(tracer.preview(kinds).items())
    st.session_state["trace_state"] = new  # bad inputs fail above and keep the earlier results
    for kind, r in new["preview"].items():
        panels.draw(kind, r)
    bars = {k: panels.bar(k) for k in kinds if tracer.cached(k) is None}
    for i, kind in enumerate(kinds):
        bar = bars.get(kind)

        def step(f, msg, bar=bar, kind=kind, i=i):
            progress((i + f) / (len(kinds) + 1), f"exact {kind} panel")  # a cancel stops here
            if bar:
                bar.progress(min(f, 1.0), text=f"exact {kind} panel")

        new["exact"][kind] = tracer.result(kind, progress=step)
        panels.draw(kind, new["exact"][kind])
        if bar:
            bar.empty()
    panels.header.empty()
    new["sever"] = tracer.severing(
        progress=lambda f, msg: progress((len(kinds) + f) / (len(kinds) + 1), "severing"))


def form_spec() -> TraceSpec:
    """The trace form's inputs as a TraceSpec (an EditkitError for a bad noise text)."""
    subj = subject.strip() or guess_subject(prompt)
    return TraceSpec(prompt, subj, target.strip() or None, int(samples),
                     parse_noise(noise, uniform=uniform, replace=replace), int(window), int(seed),
                     precision="bfloat16" if fast else "float32")


if submitted:
    with failure.container(), ui.guard("tracing"):
        spec = form_spec()
        memory = trace_ram(lm, spec.prompt, spec.samples, kinds)

        if backend_from_env().ray:  # on a Ray worker with this session's kept edits; drawn when it is done
            job = Item(exact_panels, (spec, kinds), {"cache": not recompute}, progress=True)
            exact, sever = ui.run_item("causal trace", lm, job, cancel_label="Cancel trace", on_cancel=_cancel,
                                       memory=memory, samples=int(samples))
            st.session_state["trace_state"] = {"exact": dict(exact.items()), "preview": {}, "sever": sever}
        else:
            def job(progress):
                with ui.session(lm):
                    tracer = Tracer(lm, spec, cache=not recompute)
                    trace_job(progress, tracer, kinds, panels)

            ui.run_job("causal trace", job, cancel_label="Cancel trace", on_cancel=_cancel, memory=memory,
                       samples=int(samples))
    state = st.session_state["trace_state"]

for kind in panels.kinds:
    r = state["exact"].get(kind) or state["preview"].get(kind)
    if r:
        panels.draw(kind, r)

results = Traces(state["exact"])
if len(results):
    first = results.first
    if first.prompt and first.prompt != prompt:
        st.caption(f"These results are for “{ui.md_escape(first.prompt)}”, the last trace that finished, not for "
                   "the prompt in the form.")
    st.write(f"Answer **{first.answer!r}**: clean p = {first.high_score:.3f}, corrupted p = "
             f"{first.low_score:.3f} (noise scale {first.noise_scale:.3f}; `*` marks subject tokens).")
    d1, d2 = st.columns(2)
    d1.download_button("Download CSV", results.to_frame().to_csv(index=False), "trace.csv", "text/csv",
                       key="trace_csv")
    d2.download_button("Download JSON", json.dumps(results.to_json(), indent=1), "trace.json",
                       "application/json", key="trace_json")
    st.caption("PNG: use the camera icon in each chart's toolbar.")

sev = state["sever"]
if sev:
    st.subheader("Severing: which later modules does a restored state need?")
    st.markdown(
        f"Restore the hidden state at {sev.token_str!r} (the last subject token) at layer l, while the MLP "
        "(or attention) outputs at that token stay at their corrupted values in all later layers. A drop of "
        "the green curve means the later MLPs at that token do the decisive work (ROME, Fig. 4)."
    )
    st.plotly_chart(sev.figure(), width="stretch", key="trace_sever_fig")
    if sev.precision != "float32":
        st.caption(fast_note(lm.name))

st.subheader("Average indirect effect over known facts")
st.markdown(
    "The same traces averaged over facts the model itself predicts (from ROME's known facts), by token class, "
    "with 95% bands: mean ± 1.96·sd/√N. ROME finds a strong MLP effect at the last subject token in "
    "early-to-middle layers and a late attention effect at the last token. Facts traced before (here or on the "
    "command line) come from the shared cache."
)
n_facts = st.number_input("Facts", 5, 500, 30, key="trace_aie_n")
shipped_aie = shipped_runs()
a1, a2 = st.columns(2)
if a1.button("Compute / show average effects", key="trace_aie_go"):
    with ui.guard("average indirect effect"):
        job = Item(average_indirect_effect, (int(n_facts),), progress=True)
        st.session_state["trace_aie"] = ui.run_item("average indirect effect", lm, job, memory=aie_ram(lm),
                                                    facts=int(n_facts))
if lm.name in shipped_aie and a2.button("Show the shipped run (no computing)", key="trace_aie_shipped"):
    st.session_state["trace_aie"] = shipped_aie[lm.name]
aie = st.session_state.get("trace_aie")
if aie:
    if aie.shipped:
        st.caption(f"The shipped run (the manual's Results: Tracing): {aie.n_facts} facts, {aie.samples} "
                   f"noise samples of {aie.noise}, window {aie.window} (`editkit aie --model {aie.model} "
                   f"--n {aie.n_facts} --samples {aie.samples}`).")
    for col, kind in zip(st.columns(3), ("hidden", "mlp", "attn")):
        col.plotly_chart(aie.figure(kind), width="stretch", key=f"trace_aie_{kind}")
if len(shipped_aie) > 1 and st.toggle("Where does each model recall facts? The shipped runs side by side",
                                     key="trace_aie_depth"):
    with st.container(border=True):
        st.markdown(
            "The average effects of the shipped runs, each model's layers placed at layer / (n_layers − 1) so "
            "models of different depths line up. Left: restoring the MLP outputs at the last subject token "
            "(ROME's early site, the layers it edits); right: attention at the last token (the late site that "
            "moves the recalled fact to the prediction)."
        )
        for col, (kind, token) in zip(st.columns(2), (("mlp", "last subject"), ("attn", "last token"))):
            col.plotly_chart(aie_depth({m: r.to_json() for m, r in shipped_aie.items()}, kind, token),
                             width="stretch", key=f"trace_aie_depth_{kind}")

spec_now = None
with ui.guard("two-model trace"):
    spec_now = form_spec() if prompt.strip() else None
two_models_section(lm, spec_now)

# ---- does the traced layer edit best? (tracing localizes; editing elsewhere may work as well) -----------------------
def layer_sweep_section(lm) -> None:
    """ROME at every layer for the traced fact, on the trace's layer axis (Hase et al. 2023)."""
    from editkit.editing.ram import edit_ram
    from editkit.editing.requests import EditRequest
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
    results = (st.session_state.get("trace_state") or {}).get("exact") or {}
    traced = next((results[k] for k in ("mlp", "hidden", "attn") if k in results), None)
    c1, c2 = st.columns(2)
    new = c1.text_input("New target", "Paris", key="ls_new")
    true = c2.text_input("True target (empty: the answer of the trace above)", key="ls_true").strip() or \
        (traced.answer.strip() if traced else "")
    c3, c4 = st.columns(2)
    para = c3.text_input("A paraphrase of the prompt (optional)", key="ls_para")
    neigh = c4.text_input("A neighbour prompt (another subject, same relation and the same true answer; optional)",
                          key="ls_neigh", help=NEIGHBOURS_HELP)
    if any(l >= lm.adapter.n_layers for l in st.session_state.get("ls_layers", [])):
        st.session_state.pop("ls_layers")  # another model's layers: back to every layer of this one, not to none
    layers = st.multiselect("Layers to edit", list(range(lm.adapter.n_layers)), list(range(lm.adapter.n_layers)),
                            key="ls_layers")
    st.caption("One ROME edit per layer (about 3 s each for Gemma 3 270M on 2 idle cores with its statistics "
               "cached: 51 s for all 18 layers in the benchmark report).")
    if st.button("Edit every layer", key="ls_go", disabled=not (prompt and subject and layers)):
        with ui.guard("layer sweep"):
            if subject not in prompt:
                raise EditkitError(f"the subject {subject!r} is not in the prompt")
            request = EditRequest(prompt.replace(subject, "{}", 1), subject, new, true or None,
                                  [para] if para.strip() else [], [neigh] if neigh.strip() else [])
            same = traced and traced.prompt == prompt and traced.answer.strip() == (true or "").strip()
            use = traced if same else None  # the trace above, when it is of this prompt and answer
            samples = int(st.session_state.get("trace_samples", 10))

            job = Item(layer_sweep, (request, layers),
                       {"trace_kind": "mlp", "samples": samples, "trace_result": use}, progress=True)
            memory = edit_ram(lm, ["rome"]) + trace_ram(lm, prompt, samples, ["mlp"], preview=False)
            st.session_state["ls_out"] = ui.run_item("layer sweep", lm, job, memory=memory, samples=samples)
    out = st.session_state.get("ls_out")
    if out:
        t = out.trace
        ranked = out.ranking()
        st.markdown((ranked.sentence() if ranked else f"The edit works best at layer {out.best_layer}.")
                    + (f" The {t.kind} trace at {t.token!r} peaks at layer {t.peak_layer}." if t else ""))
        st.plotly_chart(out.figure(), width="stretch", key="ls_fig")


layer_sweep_section(lm)
