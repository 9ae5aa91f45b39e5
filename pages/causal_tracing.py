"""Causal tracing page: a preview at once, ROME's three exact heatmaps as they are computed, severing, the
average indirect effect, two models side by side and ROME at every layer."""
import json
from dataclasses import dataclass

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

KINDS = ["hidden", "mlp", "attn"]


class K:
    """This page's session-state keys (its form, widgets and kept results), each named once."""

    FORM, PROMPT, SUBJECT, TARGET = "trace_form", "trace_prompt", "trace_subject", "trace_target"
    SAMPLES, NOISE, WINDOW, SEED = "trace_samples", "trace_noise", "trace_window", "trace_seed"
    KINDS, UNIFORM, REPLACE = "trace_kinds", "trace_uniform", "trace_replace"
    NO_CACHE, FAST = "trace_no_cache", "trace_fast"
    KEPT = (PROMPT, SUBJECT, TARGET, SAMPLES, NOISE, WINDOW, SEED, KINDS, UNIFORM, REPLACE)  # across visits
    STATE = "trace_state"  # {"exact": kind -> result, "preview": kind -> result, "sever": Severing | None}
    CANCELLED = "trace_cancelled"
    CSV, JSON, SEVER_FIG = "trace_csv", "trace_json", "trace_sever_fig"
    AIE, AIE_N, AIE_GO, AIE_SHIPPED, AIE_DEPTH = ("trace_aie", "trace_aie_n", "trace_aie_go",
                                                  "trace_aie_shipped", "trace_aie_depth")
    SWEEP_NEW, SWEEP_TRUE, SWEEP_PARA, SWEEP_NEIGH = "ls_new", "ls_true", "ls_para", "ls_neigh"
    SWEEP_LAYERS, SWEEP_GO, SWEEP_OUT, SWEEP_FIG = "ls_layers", "ls_go", "ls_out", "ls_fig"

    @staticmethod
    def panel(kind: str, stage: str) -> str:
        return f"trace_fig_{kind}_{stage}"

    @staticmethod
    def aie_chart(kind: str, depth: bool = False) -> str:
        return f"trace_aie_depth_{kind}" if depth else f"trace_aie_{kind}"


def intro() -> None:
    st.title("Causal tracing")
    st.markdown(
        "Where does the model recall a fact? We run the prompt once cleanly, then several times with "
        "Gaussian noise added to the subject's token embeddings, which usually destroys the answer. "
        "Restoring a single internal state to its clean value shows how much of the answer that state "
        "carries (Meng et al. 2022):"
    )
    st.latex(r"\mathrm{IE}(h_i^{(l)}) = P_{*,\,\text{clean } h_i^{(l)}}[o] - P_*[o], \qquad "
             r"x_{\text{subject}} \leftarrow x_{\text{subject}} + \epsilon,\ "
             r"\epsilon \sim \mathcal{N}(0, (3\sigma)^2)")
    with st.expander("What each view shows"):
        st.markdown(
            "**Preview (estimate).** Attribution patching replaces each restoration by its first-order "
            "Taylor term, $\\mathrm{IE} \\approx (a_{\\text{clean}} - a_*) \\cdot \\partial P_*[o] / "
            "\\partial a$, with the gradient taken in the corrupted run. One backward pass gives every cell "
            "at once, so it appears immediately; it is linear, so it misses effects that only appear after a "
            "large change (a saturated softmax), and it is drawn in grey until the exact panel replaces "
            "it.\n\n**Hidden states.** Cell (i, l) copies the clean residual-stream vector $h_i^{(l)}$ "
            "(token i after layer l) into each corrupted run and lets the rest of the network run: its "
            "colour is $P_{*,\\,\\text{clean } h_i^{(l)}}[o]$. A bright cell is a state that carries the "
            "fact.\n\n**MLP / attention.** Cell (i, l) restores the MLP (or attention) outputs at token i in "
            "the window of layers $[l - w/2,\\ l + w/2)$ together (one module adds little on its own). ROME "
            "finds the MLPs at the subject's last token in middle layers, and attention at the last token in "
            "late layers.\n\n**Severing.** Restore $h_i^{(l)}$ at the subject's last token while the MLP (or "
            "attention) outputs at that token stay at their corrupted values in every later layer: if the "
            "effect collapses, the later MLPs did the work.\n\n**Average indirect effect.** The same effects "
            "averaged over facts the model knows, per token class, with a 95% band $\\bar x \\pm 1.96\\, s / "
            "\\sqrt{N}$."
        )


@dataclass(frozen=True)
class TraceForm:
    """The trace form's inputs."""

    prompt: str
    subject: str
    target: str
    samples: int
    noise: str
    window: int
    seed: int
    kinds: list
    uniform: bool
    replace: bool
    recompute: bool
    fast: bool

    def spec(self) -> TraceSpec:
        """The inputs as a TraceSpec (an EditkitError for a bad noise text)."""
        subject = self.subject.strip() or guess_subject(self.prompt)
        return TraceSpec(self.prompt, subject, self.target.strip() or None, self.samples,
                         parse_noise(self.noise, uniform=self.uniform, replace=self.replace), self.window,
                         self.seed, precision="bfloat16" if self.fast else "float32")


def trace_form(lm) -> tuple[TraceForm, bool]:
    """The form (its values kept across visits to other pages) and whether Trace was pressed."""
    with st.form(K.FORM):
        prompt = st.text_input("Prompt", value=ui.kept(K.PROMPT, "The Space Needle is in downtown"),
                               key=K.PROMPT)
        subject = st.text_input("Subject (a substring of the prompt; guessed if empty)", key=K.SUBJECT,
                                value=ui.kept(K.SUBJECT, "Space Needle"))
        target = st.text_input("Target token (optional; default: the model's top prediction)", key=K.TARGET,
                               value=ui.kept(K.TARGET, ""))
        c1, c2, c3, c4 = st.columns(4)
        samples = c1.number_input("Noise samples n", 1, 100, ui.kept(K.SAMPLES, 10), key=K.SAMPLES)
        noise = c2.text_input("Noise ('3s' = 3 sigma, or absolute)", ui.kept(K.NOISE, "3s"), key=K.NOISE)
        window = c3.number_input("Window (MLP/attn)", 1, 40, ui.kept(K.WINDOW, 10), key=K.WINDOW)
        seed = c4.number_input("Seed", 0, 10_000, ui.kept(K.SEED, 1), key=K.SEED)
        c5, c6, c7, c8 = st.columns([1.7, 0.8, 1.1, 1.4])  # a quarter of the form clipped a kind's chip
        kinds = c5.multiselect("Kinds", KINDS, ui.kept(K.KINDS, KINDS), key=K.KINDS)
        uniform = c6.checkbox("Uniform noise", ui.kept(K.UNIFORM, False), key=K.UNIFORM)
        replace = c7.checkbox("Replace instead of add", ui.kept(K.REPLACE, False), key=K.REPLACE)
        recompute = c8.checkbox("Recompute (ignore the cache)", key=K.NO_CACHE)
        slow = slow_bf16_note(lm.device)  # no fast bf16 matmuls (an AVX2-only CPU): the exact engine wins
        fast = st.checkbox("Fast mode: bf16 matmuls in the restored runs (faster; an approximation)",
                           key=K.FAST, help=slow or fast_note(lm.name), disabled=bool(slow))
        if slow:
            st.caption(slow)
        submitted = st.form_submit_button("Trace", type="primary")
    ui.keep(*K.KEPT)
    return TraceForm(prompt, subject, target, int(samples), noise, int(window), int(seed), kinds or KINDS,
                     bool(uniform), bool(replace), bool(recompute), bool(fast) and not slow), submitted


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
        chart.plotly_chart(r.figure(), width="stretch", key=K.panel(kind, stage))
        caption.caption("Estimate (attribution patching); the exact panel replaces it when computed."
                        if stage == "preview" else peak_caption(r))

    def bar(self, kind: str):
        return self.slots[kind][2].progress(0.0, text=f"exact {kind} panel: waiting")


def peak_caption(r: TraceResult) -> str:
    """Where the exact panel peaks, at the site a researcher reads (TraceResult.site_peak), and how it was
    got."""
    t, l, p = r.site_peak()
    where = "at the subject" if r.kind != "attn" else "anywhere"
    source = "from the cache" if r.cached else f"{r.seconds:.1f} s"
    how = f"{fast_note(r.meta.get('model', ''))} " if r.approximation else "exact, "
    said = (f"Peak {where}: {r.tokens[t]!r} at layer {l}, p = {p:.3f} (IE {p - r.low_score:+.3f}); "
            f"{how}{source}.")
    if r.kind == "hidden":
        said += " The last token is left out: its hidden state in late layers is the output itself."
    return said


def trace_job(progress, tracer, kinds, panels) -> None:
    """The preview at once, then each exact panel as it is computed, then severing; results land in the
    session state as they arrive, so a cancelled trace keeps what it computed. The "computing" note goes
    however the job ends (done, failed or cancelled)."""
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
    st.session_state[K.STATE] = new  # bad inputs fail above and keep the earlier results
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


def _cancel():
    st.session_state[K.CANCELLED] = True


def run_trace(lm, form: TraceForm, panels: Panels) -> None:
    """The trace as this session's job: in process, panel by panel; on a Ray worker, drawn when it is done."""
    spec, kinds = form.spec(), form.kinds
    memory = trace_ram(lm, spec.prompt, spec.samples, kinds)
    if backend_from_env().ray:  # on a Ray worker with this session's kept edits
        job = Item(exact_panels, (spec, kinds), {"cache": not form.recompute}, progress=True)
        exact, sever = ui.run_item("causal trace", lm, job, cancel_label="Cancel trace", on_cancel=_cancel,
                                   memory=memory, samples=spec.samples)
        st.session_state[K.STATE] = {"exact": dict(exact.items()), "preview": {}, "sever": sever}
        return

    def job(progress):
        with ui.session(lm):
            trace_job(progress, Tracer(lm, spec, cache=not form.recompute), kinds, panels)

    ui.run_job("causal trace", job, cancel_label="Cancel trace", on_cancel=_cancel, memory=memory,
               samples=spec.samples)


def show_trace(state: dict, panels: Panels, prompt: str) -> None:
    """The kept panels, the answer with its clean and corrupted p, the downloads."""
    for kind in panels.kinds:
        r = state["exact"].get(kind) or state["preview"].get(kind)
        if r:
            panels.draw(kind, r)
    results = Traces(state["exact"])
    if not len(results):
        return
    first = results.first
    if first.prompt and first.prompt != prompt:
        st.caption(f"These results are for “{ui.md_escape(first.prompt)}”, the last trace that finished, not "
                   "for the prompt in the form.")
    st.write(f"Answer **{ui.md_escape(repr(first.answer))}**: clean p = {first.high_score:.3f}, corrupted p "
             f"= {first.low_score:.3f} (noise scale {first.noise_scale:.3f}; `*` marks subject tokens).")
    d1, d2 = st.columns(2)
    d1.download_button("Download CSV", results.to_frame().to_csv(index=False), "trace.csv", "text/csv",
                       key=K.CSV)
    d2.download_button("Download JSON", json.dumps(results.to_json(), indent=1), "trace.json",
                       "application/json", key=K.JSON)
    st.caption("PNG: use the camera icon in each chart's toolbar.")


def severing_section(lm, sev) -> None:
    st.subheader("Severing: which later modules does a restored state need?")
    st.markdown(
        f"Restore the hidden state at {ui.md_escape(repr(sev.token_str))} (the last subject token) at layer "
        "l, while the MLP (or attention) outputs at that token stay at their corrupted values in all later "
        "layers. A drop of the green curve means the later MLPs at that token do the decisive work (ROME, "
        "Fig. 4)."
    )
    st.plotly_chart(sev.figure(), width="stretch", key=K.SEVER_FIG)
    if sev.precision != "float32":
        st.caption(fast_note(lm.name))


def tracing_section(lm) -> TraceForm:
    """The form, the trace it asks for and the kept results; returns the form."""
    form, submitted = trace_form(lm)
    failure = st.empty()  # a failed trace says so here, under the form, not below the earlier heatmaps
    state = st.session_state.setdefault(K.STATE, {"exact": {}, "preview": {}, "sever": None})
    if submitted:
        st.session_state[K.CANCELLED] = False
    elif st.session_state.get(K.CANCELLED):
        st.warning("Trace cancelled. The panels computed before the cancel are kept; press Trace to run it "
                   "again.")
    ui.cancelled_note()
    known = [k for k in KINDS if k in state["exact"] or k in state["preview"]]
    panels = Panels(form.kinds if submitted else known)
    if submitted:
        with failure.container(), ui.guard("tracing"):
            run_trace(lm, form, panels)
        state = st.session_state[K.STATE]
    show_trace(state, panels, form.prompt)
    if state["sever"]:
        severing_section(lm, state["sever"])
    return form


def aie_section(lm) -> None:
    """The average indirect effect over known facts: computed, or the shipped run; the shipped runs side by
    side on a relative depth axis."""
    st.subheader("Average indirect effect over known facts")
    st.markdown(
        "The same traces averaged over facts the model itself predicts (from ROME's known facts), by token "
        "class, with 95% bands: mean ± 1.96·sd/√N. ROME finds a strong MLP effect at the last subject token "
        "in early-to-middle layers and a late attention effect at the last token. Facts traced before (here "
        "or on the command line) come from the shared cache."
    )
    n_facts = int(st.number_input("Facts", 5, 500, 30, key=K.AIE_N))
    shipped = shipped_runs()
    a1, a2 = st.columns(2)
    if a1.button("Compute / show average effects", key=K.AIE_GO):
        with ui.guard("average indirect effect"):
            job = Item(average_indirect_effect, (n_facts,), progress=True)
            st.session_state[K.AIE] = ui.run_item("average indirect effect", lm, job, memory=aie_ram(lm),
                                                  facts=n_facts)
    if lm.name in shipped and a2.button("Show the shipped run (no computing)", key=K.AIE_SHIPPED):
        st.session_state[K.AIE] = shipped[lm.name]
    aie = st.session_state.get(K.AIE)
    if aie:
        if aie.shipped:
            st.caption(f"The shipped run (the manual's Results: Tracing): {aie.n_facts} facts, {aie.samples} "
                       f"noise samples of {aie.noise}, window {aie.window} (`editkit aie --model {aie.model} "
                       f"--n {aie.n_facts} --samples {aie.samples}`).")
        for col, kind in zip(st.columns(3), KINDS):
            col.plotly_chart(aie.figure(kind), width="stretch", key=K.aie_chart(kind))
    if len(shipped) > 1 and st.toggle("Where does each model recall facts? The shipped runs side by side",
                                      key=K.AIE_DEPTH):
        with st.container(border=True):
            st.markdown(
                "The average effects of the shipped runs, each model's layers placed at layer / (n_layers − "
                "1) so models of different depths line up. Left: restoring the MLP outputs at the last "
                "subject token (ROME's early site, the layers it edits); right: attention at the last token "
                "(the late site that moves the recalled fact to the prediction)."
            )
            for col, (kind, token) in zip(st.columns(2), (("mlp", "last subject"), ("attn", "last token"))):
                col.plotly_chart(aie_depth(shipped, kind, token),
                                 width="stretch", key=K.aie_chart(kind, depth=True))


# ---- does the traced layer edit best? (tracing localizes; editing elsewhere may work as well) ---------
def sweep_intro() -> None:
    st.subheader("Does the traced layer edit best? Edit every layer")
    st.markdown(
        "ROME edits the layer where the trace finds the MLP effect at the subject's last token. Hase et al. "
        "(2023) edited every layer instead and found that how well an edit works barely depends on where "
        "tracing localizes the fact. Here the traced fact is rewritten with ROME at each layer: the lower "
        "chart shows, on the trace's layer axis, P(new) − P(true) on the prompt and a paraphrase (higher = "
        "the edit works) and P(true) − P(new) on other subjects (higher = nothing leaked); the dashed line "
        "is the trace's peak.")
    st.latex(r"\text{rewrite score} = "
             r"\frac{P_{\text{post}}(o^*) - P_{\text{pre}}(o^*)}{1 - P_{\text{pre}}(o^*)}")


def sweep_inputs(lm, traced) -> tuple:
    """The sweep's targets, test prompts and layers (every layer of this model by default)."""
    c1, c2 = st.columns(2)
    new = c1.text_input("New target", "Paris", key=K.SWEEP_NEW)
    true = c2.text_input("True target (empty: the answer of the trace above)", key=K.SWEEP_TRUE).strip() or \
        (traced.answer.strip() if traced else "")
    c3, c4 = st.columns(2)
    para = c3.text_input("A paraphrase of the prompt (optional)", key=K.SWEEP_PARA)
    neigh = c4.text_input("A neighbour prompt (another subject, same relation and the same true answer; "
                          "optional)", key=K.SWEEP_NEIGH, help=NEIGHBOURS_HELP)
    n = lm.adapter.n_layers
    if any(l >= n for l in st.session_state.get(K.SWEEP_LAYERS, [])):
        st.session_state.pop(K.SWEEP_LAYERS)  # another model's layers: back to every layer of this one
    layers = st.multiselect("Layers to edit", list(range(n)), list(range(n)), key=K.SWEEP_LAYERS)
    st.caption("One ROME edit per layer (about 3 s each for Gemma 3 270M on 2 idle cores with its statistics "
               "cached: 51 s for all 18 layers in the benchmark report).")
    return new, true, para, neigh, layers


def sweep_refusal(form: TraceForm, layers) -> str | None:
    """Why the sweep cannot run on the form's fact (the button is disabled and says so), or None."""
    subject = form.subject.strip()
    if not form.prompt.strip() or not subject:
        return "Fill in the trace form's prompt and subject first."
    if subject not in form.prompt:
        return f"The subject {subject!r} is not in the prompt: correct the trace form first."
    return None if layers else "Pick at least one layer."


def layer_sweep_section(lm, form: TraceForm) -> None:
    """ROME at every layer for the traced fact, on the trace's layer axis (Hase et al. 2023)."""
    from editkit.editing.ram import edit_ram
    from editkit.editing.requests import EditRequest
    from editkit.evaluation.layer_sweep import layer_sweep

    sweep_intro()
    results = (st.session_state.get(K.STATE) or {}).get("exact") or {}
    traced = next((results[k] for k in ("mlp", "hidden", "attn") if k in results), None)
    new, true, para, neigh, layers = sweep_inputs(lm, traced)
    refused = sweep_refusal(form, layers)
    if refused:
        st.caption(refused)
    if st.button("Edit every layer", key=K.SWEEP_GO, disabled=refused is not None):
        with ui.guard("layer sweep"):
            prompt, subject = form.prompt, form.subject.strip()
            if subject not in prompt:  # the form changed between the draw and the click
                raise EditkitError(f"the subject {subject!r} is not in the prompt")
            request = EditRequest(prompt.replace(subject, "{}", 1), subject, new, true or None,
                                  [para] if para.strip() else [], [neigh] if neigh.strip() else [])
            same = traced and traced.prompt == prompt and traced.answer.strip() == (true or "").strip()
            options = {"trace_kind": "mlp", "samples": form.samples, "trace_result": traced if same else None}
            job = Item(layer_sweep, (request, layers), options, progress=True)
            memory = edit_ram(lm, ["rome"]) + trace_ram(lm, prompt, form.samples, ["mlp"],
                                                              preview=False)
            st.session_state[K.SWEEP_OUT] = ui.run_item("layer sweep", lm, job, memory=memory,
                                                         samples=form.samples)
    out = st.session_state.get(K.SWEEP_OUT)
    if out:
        t, ranked = out.trace, out.ranking()
        st.markdown((ranked.sentence() if ranked else f"The edit works best at layer {out.best_layer}.")
                    + (f" The {t.kind} trace at {t.token!r} peaks at layer {t.peak_layer}." if t else ""))
        st.plotly_chart(out.figure(), width="stretch", key=K.SWEEP_FIG)


def main() -> None:
    intro()
    lm = ui.model_picker()
    if lm is None:
        return
    form = tracing_section(lm)
    aie_section(lm)
    spec, refused = None, None
    try:  # a refused form says so once, above, when Trace is pressed; here only why nothing can be traced
        spec = form.spec() if form.prompt.strip() else None
    except EditkitError as exc:
        refused = str(exc)
    two_models_section(lm, spec, refused)
    layer_sweep_section(lm, form)


if __name__ == "__main__":  # Streamlit runs a page file as a script: see ui.script_run
    ui.script_run(__file__, main)
