"""Edit & compare: one request (or a few), every registered editing method on the same base weights, every side
effect visible."""
import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import streamlit as st

from editkit.editing.defaults import load_hparams
from editkit.editing.methods import all_methods, get
from editkit.editing.ram import edit_ram, scoring_ram
from editkit.editing.requests import NEIGHBOURS_HELP, NEIGHBOURS_LABEL, EditRequest
from editkit.evaluation import EvalRecord, SequentialSpec, load_eval_set
from editkit.evaluation.compare import Comparison, compare_methods, conclusion, estimate
from editkit.evaluation.sequential import sequential_methods
from editkit.figures import editing as figures
from editkit.figures.editing import by_column
from editkit.figures.labels import legend
from editkit.runtime.cluster import Item
from editkit.tracing import TraceSpec, trace
from editkit.tracing.ram import trace_ram
from pages import ui

ui.leave_legacy_multipage_mode()

LABELS = {m.name: m.label for m in all_methods()}

st.title("Edit & compare")
st.markdown(
    "Rewrite a fact with several locate-then-edit methods and compare what else changed. Each method turns the "
    "request into a weight change ΔW of the feed-forward down-projections that keeps what other keys k output "
    r"(C = E[k kᵀ] weighs them; MEMIT's least-squares update is ΔW = R Kᵀ (λC + K Kᵀ)⁻¹). How each method spreads "
    "it over the layers:\n\n"
    + "\n".join(f"- **{m.label}**: {m.spreading}" for m in all_methods())
    + "\n\nEvery method starts from the same base weights, and your edits exist only inside your own computations: "
    "other users of this server never see them."
)
lm = ui.model_picker()
if lm is None:
    st.stop()


def _lines(text: str) -> list[str]:
    return [l.strip() for l in text.splitlines() if l.strip()]


# ---- the request ------------------------------------------------------------------------------------------------
def request_inputs() -> list[EvalRecord]:
    """The records to edit: picked from CounterFact, uploaded (CounterFact, EasyEdit or zsRE records; errors name
    the record), or written here (one request with its test prompts)."""
    sources = ["Write my own", "Pick from CounterFact", "Upload my records"]
    source = st.radio("Request", sources, horizontal=True, key="ec_source",
                      index=sources.index(ui.kept("ec_source", sources[0])))
    if source == "Upload my records":
        from editkit.evaluation.datasets import save_upload

        up = st.file_uploader("A .json / .jsonl file of CounterFact, EasyEdit or zsRE records",
                              type=["json", "jsonl"], key="ec_upload", max_upload_size=ui.upload_mb("records"))
        ui.check_upload(up, "records")
        mine = load_eval_set(str(save_upload(up.name, up.getvalue()))) if up is not None else []
        picked = st.multiselect("Records", range(len(mine)), default=[0] if mine else [], key="ec_upload_records",
                                format_func=lambda i: f"{mine[i].request.case_id}: {mine[i].request.rewrite} → "
                                                      f"{mine[i].request.target_new.strip()}")
        return [mine[i] for i in picked]
    if source == "Pick from CounterFact":
        shipped = load_eval_set("counterfact")
        labels = [f"{r.request.case_id}: {r.request.rewrite} {r.request.target_true.strip()} → "
                  f"{r.request.target_new.strip()}" for r in shipped]
        picked = st.multiselect("Records (several make a batch: ROME applies them one after another, the other "
                                "methods at once)", range(len(shipped)), default=ui.kept("ec_records", [0]),
                                format_func=lambda i: labels[i], key="ec_records")
        ui.keep("ec_source", "ec_records")
        return [shipped[i] for i in picked]
    c1, c2 = st.columns(2)
    prompt = c1.text_input("Prompt with {} for the subject", ui.kept("ec_prompt", "The mother tongue of {} is"),
                           key="ec_prompt")
    subject = c2.text_input("Subject", ui.kept("ec_subject", "Danielle Darrieux"), key="ec_subject")
    c3, c4 = st.columns(2)
    target_new = c3.text_input("New target", ui.kept("ec_new", "English"), key="ec_new")
    target_true = c4.text_input("True target (optional)", ui.kept("ec_true", "French"), key="ec_true")
    c5, c6, c7 = st.columns(3)
    para = c5.text_area("Paraphrase prompts (one per line)", ui.kept(
        "ec_para", "Danielle Darrieux, a native speaker of\nWhere Danielle Darrieux grew up, people speak"),
        key="ec_para")
    neigh = c6.text_area(NEIGHBOURS_LABEL + " (one per line)", ui.kept(
        "ec_neigh", "The mother tongue of Jean Gabin is\nThe mother tongue of Catherine Deneuve is"),
        key="ec_neigh", help=NEIGHBOURS_HELP)
    gen = c7.text_area("Generation prompts", ui.kept("ec_gen", "Danielle Darrieux's mother tongue is"), key="ec_gen")
    ui.keep("ec_source", "ec_prompt", "ec_subject", "ec_new", "ec_true", "ec_para", "ec_neigh", "ec_gen")
    return [EvalRecord(EditRequest(prompt, subject, target_new, target_true or None, _lines(para), _lines(neigh),
                                   _lines(gen)))]


records: list[EvalRecord] = []
with ui.guard("request"):
    records = request_inputs()

# ---- methods and hyperparameters ----------------------------------------------------------------------------------
def hparams_inputs(methods: list[str]) -> tuple[dict, dict]:
    """One JSON box per method, prefilled with its defaults for this model. Malformed JSON, unknown keys, NaN or
    out-of-range values are said under the box and block the run (returned as errors), never silently replaced."""
    overrides, errors = {}, {}
    with st.expander("Hyperparameters (per-model defaults from assets/hparams; edit the JSON to override)"):
        for col, m in zip(st.columns(max(len(methods), 1)), methods):
            with col, ui.guard(f"{LABELS[m]} hyperparameters"):
                default = {k: v for k, v in load_hparams(m, lm).to_dict().items() if k != "source"}
                key = f"ec_hp_{m}@{lm.name}"  # one box per model: another model's layers would be out of range
                text = st.text_area(LABELS[m], ui.kept(key, json.dumps(default, indent=1)), height=300, key=key)
                ui.keep(key)
                try:
                    overrides[m] = json.loads(text) if text.strip() else {}
                    load_hparams(m, lm, overrides[m])
                except ValueError as exc:
                    errors[m] = f"{LABELS[m]} hyperparameters: {exc}"
                    st.error(f"{errors[m]}. Fix them, or empty the box for the defaults.")
    return overrides, errors


# ---- operating points: where each method's strength knob puts it ----------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=32)
def shipped_points(method: str, model: str, stamp: float) -> dict | None:
    """A method's shipped trade-off on this model (the results manifest's operating_points), as JSON; built once
    per server process and manifest version (co-edit's are tabulated from its validation rows, a few seconds)."""
    from editkit.evaluation.manifest import operating_points

    points = operating_points(method, model)
    return None if points is None else points.to_json()


def points_of(method: str):
    from editkit.core.paths import ROOT
    from editkit.evaluation.manifest import MANIFEST
    from editkit.evaluation.points import OperatingPoints

    data = shipped_points(method, lm.name, (ROOT / MANIFEST).stat().st_mtime)
    return None if data is None else OperatingPoints.from_json(data)


def use_point(method: str, setting: dict) -> None:
    """Put a point's setting into the method's hyperparameter box (a button's callback: before the box is drawn)."""
    key = f"ec_hp_{method}@{lm.name}"
    try:
        current = json.loads(st.session_state.get(key) or ui.kept(key, "") or "{}")
    except ValueError:
        current = {}
    if not current:
        current = {k: v for k, v in load_hparams(method, lm).to_dict().items() if k != "source"}
    text = json.dumps({**current, **setting}, indent=1)
    st.session_state.setdefault("_kept_inputs", {})[key] = text
    st.session_state[key] = text  # set through the API: the browser shows the new text (a popped key did not)


def one_point_view(method: str, points) -> None:
    """One method's measured points: the figure with today's default marked, a pick, what each buys and costs."""
    labels = [p.label + (" (today's default)" if p.default else "") for p in points.points]
    default = next((i for i, p in enumerate(points.points) if p.default), 0)
    i = st.selectbox(f"{LABELS[method]}: a point of its trade-off", range(len(labels)), index=default,
                     format_func=labels.__getitem__, key=f"ec_point_{method}@{lm.name}")
    st.plotly_chart(points.figure(i), width="stretch", key=f"ec_point_fig_{method}")
    st.markdown(points.sentence() if i == default else points.picked(i))
    st.button("Use this point in the next run", key=f"ec_point_use_{method}", disabled=points.points[i].default,
              on_click=use_point, args=(method, points.points[i].setting))
    st.caption(f"Measured on {points.source}." + "".join(f" {n}." for n in points.notes if n))


def points_section(methods: list[str]) -> None:
    """Each chosen method whose strength knob has a shipped trade-off, side by side."""
    shown = [(m, points_of(m)) for m in methods]
    shown = [(m, p) for m, p in shown if p is not None]
    if not shown:
        return
    with st.expander("Operating points: the trade-off each method's strength knob was chosen from"):
        st.markdown(
            "A knob that makes an edit stronger also moves more of what it should leave alone: UltraEdit's learning "
            "rate buys efficacy (P(new) > P(true) on the rewrite) with neighbours kept (neighbourhood prompts the "
            "unedited model got right that stay right); co-edit's kept relations buy back the subject's other facts "
            "(relation specificity) with implied facts moved (logical generalization); MEMIT's norm constraint "
            "λ_n‖ΔW‖² (ENCORE) is a stabiliser for long sequences of edits. Each point is one setting measured on "
            "validation records; the star is today's default. Pick a point to see what it buys and costs, and use "
            "it for your next run.")
        for row in range(0, len(shown), 2):  # two to a row: a third of the page overlapped legend and axis title
            for col, (m, points) in zip(st.columns(2), shown[row:row + 2]):
                with col:
                    one_point_view(m, points)


methods = st.multiselect("Methods", list(LABELS), ui.kept("ec_methods", list(LABELS)), format_func=LABELS.get,
                         key="ec_methods")
with ui.guard("operating points"):
    points_section(methods)
overrides, hp_errors = hparams_inputs(methods)
c1, c2 = st.columns(2)
n_gen = c1.number_input("Generations per request", 0, 5, ui.kept("ec_ngen", 1), key="ec_ngen")
gen_tokens = c2.number_input("Tokens per generation", 5, 100, ui.kept("ec_gentokens", 30), key="ec_gentokens")
ui.keep("ec_methods", "ec_ngen", "ec_gentokens")
time_box = st.empty()


def show_estimate() -> None:
    """The run's time estimate (drawn again after a run: its statistics and edit timings are then known)."""
    if records and methods:
        with time_box.container(), ui.guard("time estimate"):
            st.caption("Time: " + estimate(lm, methods, len(records), {m: o for m, o in overrides.items()
                                                                         if m not in hp_errors})[1])


show_estimate()

ui.cancelled_note()
if st.button("Edit and compare", type="primary", key="ec_run", disabled=not (records and methods)):
    with ui.guard("editing"):
        ui.refuse(hp_errors, methods)

        # every method starts from the same weights: base + this session's kept edits
        job = Item(compare_methods, (methods, records, overrides, int(n_gen), int(gen_tokens)), progress=True)
        st.session_state["ec_out"] = ui.run_item("edit and compare", lm, job, batch=len(records),
                                                 memory=edit_ram(lm, methods, len(records), overrides),
                                                 new_tokens=int(gen_tokens) if int(n_gen) else None)
        st.session_state.pop("ec_traces", None)
        show_estimate()  # not "No estimate yet" above the results of the run that timed it


# ---- results ------------------------------------------------------------------------------------------------------
def show_metrics(out: Comparison):
    st.subheader("Metrics")
    st.markdown(
        "Efficacy: the new target beats the true one on the rewrite prompt, 1[P(o*) > P(o_c)]; generalization: the "
        "same on paraphrases; specificity: the true target still wins on neighborhood prompts (other subjects). "
        "Score = harmonic mean of the three. Fluency = weighted bi-/tri-gram entropy of generated text ×100 "
        "(repetition lowers it); consistency = TF-IDF cosine with reference text about the new target ×100 (only "
        "for CounterFact records). Reliability/generalization (acc) are EasyEdit's teacher-forced token accuracies. "
        "Generation efficacy / generalization (QAEdit): the greedy continuation of the rewrite / paraphrase prompts "
        "says the new target and no longer the true one, what a user actually reads.")
    df = out.to_frame()
    st.markdown(f"**Who did best.** {conclusion(out).sentence()}")
    st.dataframe(pd.DataFrame(by_column(figures.metrics_table(out.to_json()))), hide_index=True, width="stretch",
                 height="content")  # every measure's row on screen (the default height hid the last rows)
    st.caption("One column per method, so every measure is on screen. Each measure names its family: " + legend())
    ui.keep_buttons(lm, out.deltas, LABELS, "; ".join(f"{r.rewrite} → {r.target_new}" for r in out.requests),
                    {"model": lm.name, "requests": [r.to_dict() for r in out.requests]})
    return df


def show_probabilities(out: Comparison) -> None:
    st.subheader("P(new) vs P(true), prompt by prompt")
    st.markdown("Teacher-forced probability of each target after each prompt, before and after each edit: the "
                "rewrite and paraphrases should flip to the new target, the neighborhood prompts should not move. "
                + figures.BARS_KEY)
    for j, req in enumerate(out.requests):
        if len(out.requests) > 1:
            st.markdown(f"**{req.rewrite}** → {req.target_new!r}")
        for col, group in zip(st.columns(len(figures.GROUPS)), figures.GROUPS):
            fig = out.figure(group, j)
            if fig is None:
                col.caption(f"no {group} prompts")
                continue
            col.plotly_chart(fig, width="stretch", key=f"ec_bars_{j}_{group}")
            col.caption(figures.prompt_list(out.to_json(), j, group))


def show_changes(out: Comparison) -> None:
    st.subheader("How big is the change? ‖ΔW‖ / ‖W‖ per edited matrix")
    st.markdown("The Frobenius norm of each matrix's change relative to the matrix: a small number means a "
                "surgical edit, a large one a risk for everything else the matrix stores. When one method's "
                "change is over 20x another's the axis is logarithmic (its title says so), so the smallest bars "
                "still show: equal steps on it are equal ratios.")
    st.plotly_chart(out.norms_figure(), width="stretch", key="ec_norms")
    diagnostics = out.diagnostics()
    # the method's column medium: a small one cut "Co-edit (MEMIT + implied)" to "Co-edit (MEMIT + implie"
    st.dataframe(diagnostics, hide_index=True, width="stretch",
                 column_config={"method": st.column_config.TextColumn(width="medium")})
    if (diagnostics == figures.NOT_APPLICABLE).to_numpy().any():
        st.caption(figures.DIAGNOSTICS_BLANK)
    with st.expander("Optimisation loss curves"):
        st.plotly_chart(out.loss_figure(), width="stretch", key="ec_losses")


def show_generations(out: Comparison) -> None:
    if not any(p["generations"] for p in out.pre):
        return
    st.subheader("Generations before and after")
    st.caption("Sampled (top-k 5) with the same seed before and after, so differences come from the edit.")
    for j, pre in enumerate(out.pre):
        for g_i, g in enumerate(pre["generations"]):
            cols = st.columns(1 + len(out.methods))
            cols[0].markdown(f"**before**\n\n{ui.md_escape(g['text'])}")
            for col, m in zip(cols[1:], out.methods.values()):
                text = m.post[j]["generations"][g_i]["text"]
                col.markdown(f"**{m.label}**\n\n{ui.md_escape(text)}")
                if text == g["text"]:
                    col.caption("⚠ word for word the same as before: this edit did not change the continuation.")


def show_traces(out: Comparison) -> None:
    st.subheader("Where does the new fact live? Causal trace of the edited model")
    st.markdown("The hidden-state trace of the rewrite prompt in each edited model, with the new target as the "
                "answer: after a working edit, restoring the edited layers' states at the subject's last token "
                "should recover P(new target).")
    samples = st.number_input("Noise samples", 2, 20, 5, key="ec_trace_samples")
    if st.button("Trace the edited models", key="ec_trace_go"):
        with ui.guard("tracing the edited models"):
            req, deltas = out.requests[0], out.deltas

            def trace_job(progress):
                traces = {}
                for i, m in enumerate(m for m in out.methods if deltas.get(m)):
                    with ui.session(lm, deltas[m]):
                        spec = TraceSpec(req.rewrite, req.subject, req.target_new, int(samples), kinds="hidden")
                        r = trace(lm, spec, progress=lambda f, msg, i=i: progress((i + f) / len(deltas), msg))
                    traces[m] = r["hidden"]
                return traces

            memory = trace_ram(lm, req.rewrite, int(samples), ["hidden"])
            st.session_state["ec_traces"] = ui.run_job("trace of the edited models", trace_job, memory=memory,
                                                       samples=int(samples))
    traces = list((st.session_state.get("ec_traces") or {}).items())
    for row in range(0, len(traces), 3):  # three to a row: a heatmap needs the room for its token labels
        for col, (m, r) in zip(st.columns(3), traces[row:row + 3]):
            col.plotly_chart(figures.trace_figure(r.to_json(), LABELS.get(m, m)), width="stretch",
                             key=f"ec_trace_{m}")


def show_notes(out: Comparison) -> None:
    """Beside the metrics: each method's notes (a rewrite it does not win and the likely reason; co-edit with
    nothing implied to write) and, where its knob has a shipped trade-off, the operating point it ran at."""
    for name, m in out.methods.items():
        for d in m.result.diagnostics:
            st.warning(f"**{m.label}**: {ui.md_escape(str(d))}")
        points = points_of(name)
        if points is not None:
            st.caption(f"**{m.label}**'s operating point: {points.ran_at(m.result.hparams)}")


def show_results(out: Comparison) -> None:
    """Every view of one comparison (kept in the session until the next run)."""
    df = show_metrics(out)
    show_notes(out)
    show_probabilities(out)
    show_changes(out)
    show_generations(out)
    show_traces(out)
    d1, d2 = st.columns(2)
    d1.download_button("Download results (JSON)", json.dumps(out.to_json(), indent=1, default=str),
                       "edit_compare.json", "application/json", key="ec_json")
    d2.download_button("Download metrics (CSV)", df.to_csv(index=False), "edit_compare.csv", "text/csv", key="ec_csv")
    model_download(out)


def _about_first_request(result, out: Comparison):
    """A bleed map or ripple result of this session, if it is about the comparison's first request."""
    return result if result and result.request.to_dict() == out.requests[0].to_dict() else None


def report_section(out: Comparison | None) -> None:
    """The comparison as one self-contained HTML file (evaluation/html_report.py), with the bleed map and the
    ripple grid above when they were computed for its first request; built when the button is pressed. Drawn
    after those sections, so that a map computed in this run is in it."""
    if not out:
        return
    st.subheader("A report to keep or share")
    st.markdown("One HTML file of this comparison that opens in any browser without the internet and prints: "
                "the request, every method's metrics with their 95% intervals, the charts, who did best, the "
                "versions and the command that computes it again.")
    bleed = _about_first_request(st.session_state.get("ec_bleed"), out)
    ripple = _about_first_request(st.session_state.get("ec_ripple"), out)

    def build() -> str:
        from editkit.evaluation.compare import conclusion as sentence
        from editkit.evaluation.html_report import comparison_document

        return comparison_document(out, sentence(out).sentence(), bleed, ripple).render()

    parts = " and ".join(p for p, r in (("the bleed map", bleed), ("the ripple grid", ripple)) if r)
    st.download_button("Download a report (HTML)", build, "edit_compare_report.html", "text/html",
                       key="ec_report", on_click="ignore")
    st.caption(f"With {parts} of the first request." if parts else
               "The bleed map and the ripple grid join it once computed above for the first request.")


GGUF_KINDS = {"GGUF q8_0 (llama.cpp, Ollama; smallest)": ("gguf", "q8_0"), "GGUF f16": ("gguf", "f16"),
              "GGUF f32 (exactly the model compared here)": ("gguf", "f32"),
              "Hugging Face folder (.zip, transformers)": ("hf", None)}


def model_download(out: Comparison) -> None:
    """One method's edited model as a file: GGUF or a zipped Hugging Face folder, built when the button is
    pressed (model/export.py). Only for the server's own browser: the file is held in the server's memory
    while the session lasts; anyone can take the patch (sidebar) and run `editkit export` on their machine."""
    from editkit.model.export import as_bytes

    deltas = [m for m, o in out.methods.items() if o.result.delta]
    if not deltas or out.model != lm.name:
        return
    st.markdown("**Take an edited model out of editkit**")
    if not ui.visitor().local:
        st.caption("Whole models are downloaded from the server's own browser only. Keep the edit, download "
                   "it as a patch (sidebar) and run `editkit export --patch P --gguf edited.gguf` yourself.")
        return
    from editkit.model.export import has_source_gguf
    from editkit.model.gguf_export import refusal

    no_gguf = refusal(lm, has_source_gguf(lm))  # a family GGUF cannot take: the folder alone is offered
    kinds = {k: v for k, v in GGUF_KINDS.items() if no_gguf is None or v[0] == "hf"}
    c1, c2, c3 = st.columns(3)
    method = c1.selectbox("Edited model of", deltas, format_func=LABELS.get, key="ec_export_method")
    fmt, gguf_type = kinds[c2.selectbox("Format", list(kinds), key="ec_export_kind")]
    kept = [e["delta"] for e in ui.my_edits(lm)]  # edits act in this thread only: handed to the build
    name = f"{lm.name.replace('/', '--')}-{method}" + (f"-{gguf_type}.gguf" if fmt == "gguf" else "")

    def build() -> bytes:
        from editkit.model import isolation

        with isolation.session(lm, kept):
            if fmt == "gguf":
                return as_bytes(lambda path: out.export_gguf(method, path, lm, gguf_type), name)
            return as_bytes(lambda path: out.export_hf(method, path, lm), name)

    c3.download_button("Download the edited model", build, name + (".zip" if fmt == "hf" else ""),
                       "application/octet-stream", key="ec_export_go", on_click="ignore")
    st.caption(f"The base model with {LABELS.get(method, method)}'s edit"
               + (" and your kept edits" if kept else "") + ": GGUF loads in llama.cpp, Ollama and editkit, "
               "the folder with transformers. f32 is the compared model exactly; f16 and q8_0 are smaller "
               "and round its weights (the manual's \"Take an edit out of editkit\")."
               + (f" No GGUF for this model: {no_gguf}." if no_gguf else ""))


out = st.session_state.get("ec_out")
if out:
    if records and [r.request.to_dict() for r in records] != [r.to_dict() for r in out.requests]:
        shown = "; ".join(f"{r.rewrite} → {r.target_new.strip()}" for r in out.requests)
        st.caption(f"The results below are for the last run ({ui.md_escape(shown[:200])}), not for the request "
                   "above: press **Edit and compare** to run it.")
    show_results(out)
else:
    st.info("Enter a request, pick methods and press **Edit and compare**.")


# ---- AlphaEdit's null space, and what hundreds of edits in a row do to each method ----------------------------------
def spectrum_section(lm) -> None:
    """The eigenvalues of C = E[k kᵀ] at AlphaEdit's layers, and the null space its rule selects."""
    from editkit.editing.nullspace import NULL_RULES
    from editkit.editing.spectrum import spectrum

    st.subheader("Why AlphaEdit protects old knowledge: the spectrum of the key statistics")
    st.markdown(
        "Keys of ordinary text fill only part of the key space: most eigenvalues of C = E[k kᵀ] are orders of "
        "magnitude below the largest. AlphaEdit projects each update onto the directions with the smallest "
        "eigenvalues (P = U₀U₀ᵀ, ΔW = R K₁ᵀ P (K_p K_pᵀ P + K₁K₁ᵀ P + αI)⁻¹), where ordinary keys have almost no "
        "component, so ΔW k ≈ 0 for them. The *energy* rule puts at most a fraction of E‖k‖² in that null space, "
        "which means the same on any model; upstream's absolute 2e-2 depends on the size of the activations.")
    c1, c2 = st.columns(2)
    rules = list(NULL_RULES)
    default = load_hparams("alphaedit", lm)
    rule = c1.selectbox("Null-space rule", rules, index=rules.index(default.nullspace_rule), key="ec_spec_rule",
                        help="; ".join(f"{k}: {v}" for k, v in NULL_RULES.items()))
    threshold = c2.number_input("Threshold", min_value=1e-6, max_value=1e3, value=float(default.nullspace_threshold),
                                format="%.4g", key="ec_spec_threshold")
    if st.button("Show the spectrum", key="ec_spec_go"):
        with ui.guard("spectrum"), st.spinner("eigendecomposition of C (cached after the first time)"):
            st.session_state["ec_spec"] = spectrum(lm, rule=rule, threshold=float(threshold))
    spec = st.session_state.get("ec_spec")
    if spec and spec.model == lm.name:
        st.plotly_chart(spec.figure(), width="stretch", key="ec_spec_fig")
        st.dataframe(pd.DataFrame([{"layer": r.layer, "null-space dimension": f"{r.null_dimension}/{r.width}",
                                    "share of E‖k‖² inside": f"{100 * r.null_energy:.2f}%",
                                    "eigenvalue cut": r.cut, "largest eigenvalue": r.largest,
                                    "upstream 2e-2: dimension": r.upstream_null_dimension,
                                    "upstream 2e-2: share of E‖k‖²": f"{100 * r.upstream_null_energy:.2f}%"}
                                   for r in spec.layers]), hide_index=True, width="stretch")


def lifelong_section(lm) -> None:
    """Lifelong editing: the shipped run's curves (500 edits), and a short run of your own."""
    from editkit.evaluation.lifelong import SHIPPED, SHIPPED_1000, SHIPPED_STABILISERS
    from editkit.figures.labels import legend

    st.subheader("Lifelong editing: hundreds of edits, one batch after another")
    st.markdown(
        "Each batch of CounterFact edits is computed on the weights the earlier batches left. After each batch: "
        "efficacy, generalization and specificity of all edits so far, retention (earlier edits that worked and "
        "still work), fluency of generated text on fixed prompts, WikiText perplexity and the size of the "
        "accumulated ‖ΔW‖. Batch t is solved at W_t = W_0 + ΔW_1 + … + ΔW_(t-1); retention = the share of earlier "
        "edits with P(new) > P(true) right after their batch that still have it. Batch size 1 is the classic "
        "sequential stress test. ROME collapses in this setting; AlphaEdit's claim is that it does not. Locality is "
        "measured against the ORIGINAL model: its answers on the neighborhood prompts are cached before the first "
        "edit, and 'kept' / 'locality' are the shares of those answers (P(true) > P(new); argmax tokens) the edits "
        "left unchanged. Headers tag each metric's family: " + legend())
    if SHIPPED.exists():
        with ui.guard("the shipped run"):
            shipped, parts = shipped_runs(str(SHIPPED), SHIPPED.stat().st_mtime)
            first = next(iter(shipped.values()))
            st.caption(f"Shipped run on {first.model}: {first.n} CounterFact edits; {first.notes}")
            draw_parts(parts, ("ec_life_shipped", "ec_life_shipped_layers"))
            unshipped_note(shipped)
    if SHIPPED_STABILISERS.exists():
        title = "Stabilisers against ROME's collapse (120 edits, shipped run)"
        with st.expander(title), ui.guard("the stabilisers' run"):
            st.markdown(
                "Fixes for the collapse limit how far each edit pushes. ENCORE's early stop ends the target "
                "optimisation at the second step where the new target is on top, and editkit's shift bound keeps "
                "the target shift ‖v* − v‖ ≤ b (ENCORE's own norm constraint acts on MEMIT's update: the 1,000-edit "
                "run below); NAS rescales every value vector to one anchor norm, v* ← n̄ v*/‖v*‖. Watch ‖ΔW‖/‖W‖ "
                "and the condition number cond(W + ΔW) = σ_max/σ_min: with the defaults they climb before the "
                "perplexity does, and ROME collapses at edit 100 (perplexity > 2x); with either stabiliser they stay "
                "flat.")
            draw_parts(shipped_runs(str(SHIPPED_STABILISERS), SHIPPED_STABILISERS.stat().st_mtime)[1],
                       ("ec_life_stab", "ec_life_stab_layers"))
    if SHIPPED_1000.exists():
        with st.expander("1,000 edits in batches of 100 (shipped run)"), ui.guard("the 1,000-edit run"):
            st.markdown(
                "Every batch method over the first 1,000 records of counterfact-edit, 100 per batch, and MEMIT and "
                "AlphaEdit with a stabiliser, drawn dashed in their method's colour: NAS rescales every value "
                "vector to the norm its unedited edits have, v* ← n̄ v*/‖v*‖; the shift bound keeps each target "
                "shift ‖v* − v‖ ≤ b, b = 415 the median shift at their last layer; ENCORE adds λ_n‖Δ‖² to MEMIT's "
                "objective and keeps the earlier edits' keys, Δ (λC + λ_n I + K_p K_pᵀ + K Kᵀ) = R Kᵀ with λ_n = 10 "
                "chosen on validation edits. Hollow markers are checkpoints "
                "measured on a sample of 50 edits; the last one measures all of them. A run that stopped early "
                "says where and is left out of the sentence's ranking.")
            runs_1000, parts_1000 = shipped_runs(str(SHIPPED_1000), SHIPPED_1000.stat().st_mtime)
            draw_parts(parts_1000, ("ec_life_1000", "ec_life_1000_layers"))
            unshipped_note(runs_1000, batch_only=True)
    c1, c2, c3 = st.columns(3)
    chosen = c1.multiselect("Methods", list(LABELS), list(LABELS), format_func=LABELS.get, key="ec_life_methods")
    n = int(c2.number_input("Edits", 2, 200, 20, key="ec_life_n"))
    batch = int(c3.number_input("Batch size (ROME: 1)", 1, 50, 5, key="ec_life_batch"))
    if st.button("Run lifelong editing", key="ec_life_go", disabled=not chosen):
        with ui.guard("lifelong editing"):
            ui.refuse(hp_errors, chosen)
            records = load_eval_set("counterfact", n)

            plans = {}
            for m in chosen:
                b = batch if get(m).batch else 1
                plans[m] = (overrides.get(m), SequentialSpec(batch=b, eval_every=b * max(1, batch // b), sample=20,
                                                             ppl_tokens=512, fluency_tokens=20))
            job = Item(sequential_methods, (plans, records), progress=True)
            memory = edit_ram(lm, chosen, batch, overrides) + scoring_ram(lm)
            st.session_state["ec_life"] = ui.run_item("lifelong editing", lm, job, memory=memory, sequential=n)
    mine = st.session_state.get("ec_life")
    if mine:
        draw_runs(mine, ("ec_life_fig", "ec_life_layers"),
                  "Per edited matrix: ‖ΔW‖/‖W‖ and the condition number of W + ΔW (σ_max/σ_min, the quantity "
                  "PRUNE bounds), after each checkpoint.")


def run_parts(runs: dict) -> tuple:
    """Lifelong runs (method -> LifelongRun) as what the page draws: the sentence that concludes them, the metric
    curves, the per-layer norm and condition number, the table (one column per method, so it fits the page)."""
    from editkit.evaluation.lifelong import Lifelong
    from editkit.figures.labels import readable

    life = Lifelong.of(runs, "counterfact")
    return (life.conclusion(), life.figure(), life.layer_figure(),
            pd.DataFrame(by_column(readable(life.table), "label")))


@st.cache_resource(show_spinner=False, max_entries=4)
def shipped_runs(path: str, mtime: float) -> tuple[dict, tuple]:
    """A shipped lifelong file's runs and drawn parts, built once per server process (per file version): its four
    figures took ~0.25 s of the server's one Python core (plotly, under the GIL) on every visit of this page.
    Shared between sessions and never changed (st.plotly_chart copies a figure before serializing it)."""
    from editkit.evaluation.lifelong import load_results

    runs = load_results(Path(path))
    return runs, run_parts(runs)


def unshipped_note(runs: dict, batch_only: bool = False) -> None:
    """The registered methods this shipped file has no run of (added since it was made), said as such."""
    from editkit.evaluation.lifelong import without_run

    note = without_run(runs, batch_only)
    if note:
        st.caption(note)


def draw_parts(parts: tuple, keys: tuple[str, str], layer_caption: str = "") -> None:
    conclusion_text, figure, layer_figure, table = parts
    st.markdown(conclusion_text)
    st.plotly_chart(figure, width="stretch", key=keys[0])
    if layer_caption:
        st.caption(layer_caption)
    st.plotly_chart(layer_figure, width="stretch", key=keys[1])
    st.table(table.set_index("measure"))  # wraps its headers: ten runs side by side fit the page, no sideways scroll


def draw_runs(runs: dict, keys: tuple[str, str], layer_caption: str = "") -> None:
    """Lifelong runs (method -> LifelongRun): see run_parts."""
    draw_parts(run_parts(runs), keys, layer_caption)


spectrum_section(lm)
lifelong_section(lm)


# ---- side effects: why neighbours move, and what another setting would do -------------------------------------------
def bleed_section(lm, records, overrides) -> None:
    """The bleed map of the first request: measured rise of P(new) on other subjects vs the update's share."""
    from editkit.evaluation.bleed import bleed_map

    st.subheader("Why did neighbours move? The bleed map")
    st.markdown(
        "An edit changes a matrix W by ΔW, so at every token whose input to W is k the layer's output changes by "
        "exactly ΔW k. ROME's update is rank one, so that change is the edited subject's own change scaled by a "
        "share s: a neighbour whose key looks like the edited subject's *to C⁻¹* (s near 1) is pushed toward the "
        "new target just as hard. Each point is one prompt about another subject (CounterFact neighbours, known "
        "facts of the same relation): x = its largest share over its tokens, y = how much P(new) rose.")
    st.latex(r"\Delta W k = \Lambda\,(C^{-1}k_*)^\top k = s(k)\,(v_* - W k_*),\qquad "
             r"s(k) = \frac{(C^{-1}k_*)^\top k}{(C^{-1}k_*)^\top k_*}")
    st.caption("MEMIT, PMET and AlphaEdit: s = Σ_l ⟨ΔW_l k, ΔW_l k*⟩ / Σ_l ‖ΔW_l k*‖², with their own updates.")
    if not records:
        st.info("Choose a request above to map its bleed.")
        return
    c1, c2 = st.columns(2)
    method = c1.selectbox("Method", list(LABELS), format_func=LABELS.get, key="ec_bleed_method")
    n_facts = c2.number_input("Known facts of the same relation", 0, 50, 15, key="ec_bleed_facts")
    if st.button("Map the bleed of the first request", key="ec_bleed_go"):
        with ui.guard("bleed map"):
            ui.refuse(hp_errors, [method])

            job = Item(bleed_map, (method, records[0].request, overrides.get(method)),
                       {"relation": records[0].relation, "n_facts": int(n_facts)}, progress=True)
            st.session_state["ec_bleed"] = ui.run_item("bleed map", lm, job, facts=int(n_facts),
                                                       memory=edit_ram(lm, [method], 1, overrides))
    out = st.session_state.get("ec_bleed")
    if not out:
        return
    st.plotly_chart(out.figure(), width="stretch", key="ec_bleed_fig")
    c = out.check
    if c is None:
        st.caption(f"{out.method} declares no prediction of its effect on other keys: the chart shows the "
                   "measured rise only.")
    else:
        st.caption(f"Check: the predicted change ({out.formula}) matches the measured change of the edited "
                   f"layer's output at every token to {c['max_error']:.1e} of the largest change.")
    rows = [{"source": r.source, "prompt": r.prompt, "share s": None if r.share is None else round(r.share, 3),
             "at token": r.token, "P(new) before": round(r.p_new_before, 3), "P(new) after": round(r.p_new_after, 3)}
            for r in sorted(out.rows, key=lambda r: -abs(r.share or 0.0))]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def sweep_inputs():
    """The method, the records (a shipped set or the user's file; None until uploaded), their number and the grid."""
    from editkit.evaluation import EVAL_SETS
    from editkit.evaluation.datasets import save_upload

    c1, c2, c3 = st.columns(3)
    method = c1.selectbox("Method", list(LABELS), format_func=LABELS.get, key="ec_sweep_method")
    choices = list(EVAL_SETS) + ["my own file"]
    set_choice = c2.selectbox("Records", choices, index=choices.index("counterfact-val"), key="ec_sweep_set")
    n = int(c3.number_input("Records per setting", 1, 1000, 10, key="ec_sweep_n"))
    set_name = set_choice
    if set_choice == "my own file":
        up = st.file_uploader("A .json / .jsonl file of CounterFact, EasyEdit or zsRE records",
                              type=["json", "jsonl"], key="ec_sweep_upload", max_upload_size=ui.upload_mb("records"))
        set_name = None
        if up is not None:
            with ui.guard("your records"):
                ui.check_upload(up, "records")
                set_name = str(save_upload(up.name, up.getvalue()))
    params = st.text_area("Values to try, one hyperparameter per line: name=v1,v2,... (every combination runs)",
                          "mom2_shrinkage=0,0.3,0.6", key="ec_sweep_params")
    return method, set_name, n, _lines(params)


def sweep_section(lm) -> None:
    """A hyperparameter sweep on an evaluation set, drawn as the trade-off it is (Pareto chart)."""
    from editkit.evaluation.sweep import SWEEP, sweep
    from editkit.evaluation.sweep import conclusion as sweep_conclusion

    st.subheader("Tune the trade-off: a hyperparameter sweep")
    st.markdown(
        "An edit must win on the rewrite and its paraphrases (efficacy, generalization) without flipping other "
        "subjects (specificity). Settings that push harder, e.g. less weight decay on δ or a larger norm clamp, "
        "help the first two and hurt the third; statistics C that separate keys better help all three. Each point "
        "is one setting evaluated on the same records; outlined points are Pareto-optimal: no other setting is "
        "at least as good on all three rates. Choose settings on a validation set, never on the set you report.")
    st.latex(r"\text{efficacy} = \mathbb{E}\,1[P(o^*) > P(o^c)]\ \text{(rewrite)},\quad "
             r"\text{specificity} = \mathbb{E}\,1[P(o^c) > P(o^*)]\ \text{(neighbours)}")
    method, set_name, n, params = sweep_inputs()
    st.caption("Each setting edits every record once (ROME one at a time, the others in batches of 10); settings "
               "that differ only in the statistics or λ reuse the optimized targets, and finished settings are "
               "cached, so a wider grid only computes what is new.")
    if st.button("Run the sweep", key="ec_sweep_go", disabled=set_name is None):
        with ui.guard("sweep"):
            ui.refuse(hp_errors, [method])

            job = Item(sweep, (method, params, replace(SWEEP, set_name=set_name, n=n)),
                       {"hparams": overrides.get(method)}, progress=True)
            st.session_state["ec_sweep"] = ui.run_item("sweep", lm, job, facts=n,
                                                       memory=edit_ram(lm, [method], 1, overrides))
    out = st.session_state.get("ec_sweep")
    if out:
        st.markdown(sweep_conclusion(out))
        st.plotly_chart(out.figure(("efficacy", "generalization", "gen_efficacy")), width="stretch",
                        key="ec_sweep_fig")
        st.dataframe(out.to_frame(), hide_index=True, width="stretch")
        st.download_button("Download the sweep (JSON)", json.dumps(out.to_json(), indent=1, default=str),
                           "sweep.json", "application/json", key="ec_sweep_json")


def ripple_section(lm, records, overrides) -> None:
    """What the first request should move beside what it must not: implied facts before and after each method."""
    from editkit.data.implications import CRITERIA, relation_of, table
    from editkit.evaluation.ripple import ripple_view

    st.subheader("What should the edit move? Ripple effects")
    st.markdown(
        r"Move the Eiffel Tower to Rome and it should also be *in Italy*, answer to its other names, and keep its "
        r"architect; Paris should stay in France. From the edit (s, r, o → o\*) editkit derives such facts from "
        r"the model's **own** answers: a rule (r, r₂) composes (s, r, o\*) with (o\*, r₂, z\*) into (s, r∘r₂, "
        r"z\*), with z\* the model's top-1 for o\*, kept only if it knows it. Each cell is P(expected | prompt) "
        "after an edit, green where the fact moved (→) or stayed (=) as it should. The in-context reference "
        "changes no weight: it writes \"Imagine that <the new fact>.\" before every prompt.")
    if not records:
        st.info("Choose a request above to test its ripple effects.")
        return
    rels = table()["relations"]
    req = records[0].request
    guess = records[0].relation or req.relation or relation_of(req.prompt)
    options = [None] + list(rels)
    c1, c2 = st.columns([2, 1])
    relation = c1.selectbox("Relation of the edited fact (Wikidata)", options,
                            index=options.index(guess) if guess in options else 0, key="ec_ripple_rel",
                            format_func=lambda r: "none: derive nothing" if r is None else f"{r}: {rels[r]['label']}")
    reference = c2.checkbox("In-context reference", True, key="ec_ripple_ref")
    mine = st.data_editor(pd.DataFrame({"prompt": ["The Eiffel Tower is in the country of"], "expected answer":
                                        ["Italy"], "should": ["move"]}).iloc[:0], num_rows="dynamic",
                          column_config={"should": st.column_config.SelectboxColumn(options=["move", "stay"])},
                          key="ec_ripple_mine", width="stretch")
    st.caption("Add implied facts of your own: a prompt, the answer it should have after the edit, and whether the "
               "edit should move it there or leave it there.")
    if st.button("Test the ripple effects of the first request", key="ec_ripple_go", disabled=not methods):
        with ui.guard("ripple effects"):
            ui.refuse(hp_errors, methods)
            extra = [{"prompt": str(r["prompt"] or ""), "answer": str(r["expected answer"] or ""),
                      "move": r["should"] != "stay"} for _, r in mine.iterrows()
                     if str(r["prompt"] or "").strip() or str(r["expected answer"] or "").strip()]
            job = Item(ripple_view, (req, methods, relation or "", overrides, extra, reference), progress=True)
            st.session_state["ec_ripple"] = ui.run_item("ripple effects", lm, job, batch=len(methods) + 1,
                                                        memory=edit_ram(lm, methods, 1, overrides))
    out = st.session_state.get("ec_ripple")
    if not out:
        return
    fig = out.figure()
    if fig is None:
        st.info(out.message)
    else:
        st.plotly_chart(fig, width="stretch", key="ec_ripple_fig")
        st.markdown(f"**{out.conclusion}**")
        st.caption("Criteria: " + "; ".join(f"{k} = {v}" for k, v in CRITERIA.items()) + ". Efficacy and "
                   "neighbourhood specificity of each method: " + "; ".join(
                       f"{m.label} {_rate(m.efficacy)} / {_rate(m.specificity)}" for m in out.methods))
    for m in out.methods:  # co-edit with nothing implied to write: it edited as MEMIT would, and why
        for note in m.notes:
            st.warning(f"**{m.label}**: {ui.md_escape(note)}")
    show_written(out)
    dropped = out.derivation.dropped
    if dropped:
        with st.expander(f"{len(dropped)} candidate fact(s) dropped, each with its reason"):
            st.dataframe(pd.DataFrame([d.to_dict() for d in dropped]), hide_index=True, width="stretch")


def show_written(out) -> None:
    """What a propagation method put in its batch besides the request (co-edit's implications and kept facts)."""
    from editkit.evaluation.ripple import WRITTEN

    rows = [{"method": m.label, "prompt": w["prompt"], "answer written": w["target"].strip(), "why": WRITTEN[w["why"]]}
            for m in out.methods for w in m.wrote]
    if not rows:
        return
    names = ", ".join(dict.fromkeys(r["method"] for r in rows))
    with st.expander(f"What {names} wrote besides the request ({len(rows)} fact(s))"):
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
        st.caption("A propagation method edits more than the request: the facts the new one implies, so that they "
                   "move with it, and the subject's other facts at the model's own answers, so that they stay. It "
                   "writes them in other words than the prompts tested above, so a pass above is not a copy.")


def _rate(pair) -> str:
    return "-" if not pair else f"{100 * pair[1]:.0f}%"


bleed_section(lm, records, overrides)
ripple_section(lm, records, overrides)
report_section(st.session_state.get("ec_out"))
sweep_section(lm)
