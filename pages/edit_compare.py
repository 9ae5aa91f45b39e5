"""Edit & compare: one request (or a few), every registered editing method on the same base weights, every
side effect visible."""
import json

import pandas as pd
import streamlit as st

from editkit.editing.defaults import load_hparams
from editkit.editing.methods import all_methods, label, names
from editkit.editing.ram import edit_ram
from editkit.editing.requests import NEIGHBOURS_HELP, NEIGHBOURS_LABEL, EditRequest
from editkit.evaluation import EvalRecord, load_eval_set
from editkit.evaluation.compare import Comparison, compare_methods, conclusion, estimate
from editkit.figures import editing as figures
from editkit.figures.editing import by_column
from editkit.figures.labels import legend
from editkit.runtime.cluster import Item
from editkit.tracing import TraceSpec, trace
from editkit.tracing.ram import trace_ram
from pages import edit_sections as sections
from pages import ui
from pages.edit_export import model_download, report_section
from pages.edit_points import hparams_key, points_of, points_section
from pages.edit_sections import Setup


class K:
    """This page's session-state keys (its widgets and kept results), each named once."""

    SOURCE, RECORDS, UPLOAD, UPLOAD_RECORDS = "ec_source", "ec_records", "ec_upload", "ec_upload_records"
    PROMPT, SUBJECT, NEW, TRUE = "ec_prompt", "ec_subject", "ec_new", "ec_true"
    PARA, NEIGH, GEN = "ec_para", "ec_neigh", "ec_gen"
    METHODS, NGEN, GENTOKENS, RUN, OUT = "ec_methods", "ec_ngen", "ec_gentokens", "ec_run", "ec_out"
    NORMS, LOSSES, CSV, JSON = "ec_norms", "ec_losses", "ec_csv", "ec_json"
    TRACES, TRACE_GO, TRACE_SAMPLES = "ec_traces", "ec_trace_go", "ec_trace_samples"
    REQUEST_KEPT = (SOURCE, PROMPT, SUBJECT, NEW, TRUE, PARA, NEIGH, GEN)  # kept across visits to other pages

    @staticmethod
    def trace(method: str) -> str:
        return f"ec_trace_{method}"

    @staticmethod
    def bars(request: int, group: str) -> str:
        return f"ec_bars_{request}_{group}"

    hparams = staticmethod(hparams_key)  # one box per model: another model's layers would be out of range


JOB = "edit and compare"


def intro() -> None:
    st.title("Edit & compare")
    st.markdown(
        "Rewrite a fact with several locate-then-edit methods and compare what else changed. Each method "
        "turns the request into a weight change ΔW of the feed-forward down-projections that keeps what "
        "other keys k output (C = E[k kᵀ] weighs them; MEMIT's least-squares update is ΔW = R Kᵀ (λC + K "
        "Kᵀ)⁻¹). How each method spreads it over the layers:\n\n"
        + "\n".join(f"- **{m.label}**: {m.spreading}" for m in all_methods())
        + "\n\nEvery method starts from the same base weights, and your edits exist only inside your own "
        "computations: other users of this server never see them."
    )


def _lines(text: str) -> list[str]:
    return [l.strip() for l in text.splitlines() if l.strip()]


# ---- the request -------------------------------------------------------------------------------------------
def request_inputs() -> list[EvalRecord]:
    """The records to edit: picked from CounterFact, uploaded (CounterFact, EasyEdit or zsRE records; errors
    name the record), or written here (one request with its test prompts)."""
    sources = ["Write my own", "Pick from CounterFact", "Upload my records"]
    source = st.radio("Request", sources, horizontal=True, key=K.SOURCE,
                      index=sources.index(ui.kept(K.SOURCE, sources[0])))
    if source == "Upload my records":
        from editkit.evaluation.datasets import save_upload

        up = st.file_uploader("A .json / .jsonl file of CounterFact, EasyEdit or zsRE records",
                              type=["json", "jsonl"], key=K.UPLOAD, max_upload_size=ui.upload_mb("records"))
        ui.check_upload(up, "records")
        mine = load_eval_set(str(save_upload(up.name, up.getvalue()))) if up is not None else []
        picked = st.multiselect("Records", range(len(mine)), default=[0] if mine else [],
                                key=K.UPLOAD_RECORDS,
                                format_func=lambda i: f"{mine[i].request.case_id}: {mine[i].request.rewrite} "
                                                      f"→ {mine[i].request.target_new.strip()}")
        return [mine[i] for i in picked]
    if source == "Pick from CounterFact":
        shipped = load_eval_set("counterfact")
        labels = [f"{r.request.case_id}: {r.request.rewrite} {r.request.target_true.strip()} → "
                  f"{r.request.target_new.strip()}" for r in shipped]
        picked = st.multiselect("Records (several make a batch: ROME applies them one after another, the "
                                "other methods at once)", range(len(shipped)),
                                default=ui.kept(K.RECORDS, [0]),
                                format_func=lambda i: labels[i], key=K.RECORDS)
        ui.keep(K.SOURCE, K.RECORDS)
        return [shipped[i] for i in picked]
    c1, c2 = st.columns(2)
    prompt = c1.text_input("Prompt with {} for the subject", ui.kept(K.PROMPT, "The mother tongue of {} is"),
                           key=K.PROMPT)
    subject = c2.text_input("Subject", ui.kept(K.SUBJECT, "Danielle Darrieux"), key=K.SUBJECT)
    c3, c4 = st.columns(2)
    target_new = c3.text_input("New target", ui.kept(K.NEW, "English"), key=K.NEW)
    target_true = c4.text_input("True target (optional)", ui.kept(K.TRUE, "French"), key=K.TRUE)
    c5, c6, c7 = st.columns(3)
    para = c5.text_area("Paraphrase prompts (one per line)", ui.kept(
        K.PARA, "Danielle Darrieux, a native speaker of\nWhere Danielle Darrieux grew up, people speak"),
        key=K.PARA)
    neigh = c6.text_area(NEIGHBOURS_LABEL + " (one per line)", ui.kept(
        K.NEIGH, "The mother tongue of Jean Gabin is\nThe mother tongue of Catherine Deneuve is"),
        key=K.NEIGH, help=NEIGHBOURS_HELP)
    gen = c7.text_area("Generation prompts", ui.kept(K.GEN, "Danielle Darrieux's mother tongue is"),
                       key=K.GEN)
    ui.keep(*K.REQUEST_KEPT)
    elsewhere = [p for p in _lines(para) + _lines(gen) if subject.strip() and subject.strip() not in p]
    if elsewhere:  # the example's prompts left beside a subject of one's own (the second walk)
        st.warning(f"{len(elsewhere)} paraphrase or generation prompt(s) do not mention the subject "
                   f"{subject.strip()!r}: " + "; ".join(repr(p) for p in elsewhere[:3]) + ". They measure "
                   "another subject, not this edit: replace them, or empty the box.")
    return [EvalRecord(EditRequest(prompt, subject, target_new, target_true or None, _lines(para),
                                   _lines(neigh), _lines(gen)))]


# ---- methods and hyperparameters ---------------------------------------------------------------------------
def hparams_inputs(lm, methods: list[str]) -> tuple[dict, dict]:
    """One JSON box per method, prefilled with its defaults for this model. Malformed JSON, unknown keys, NaN
    or out-of-range values are said under the box and block the run (returned as errors), never silently
    replaced."""
    overrides, errors = {}, {}
    with st.expander("Hyperparameters (per-model defaults from assets/hparams; edit the JSON to override)"):
        for col, m in zip(st.columns(max(len(methods), 1)), methods):
            with col, ui.guard(f"{label(m)} hyperparameters"):
                default = {k: v for k, v in load_hparams(m, lm).to_dict().items() if k != "source"}
                key = K.hparams(m, lm.name)  # one box per model: another model's layers would be out of range
                text = st.text_area(label(m), ui.kept(key, json.dumps(default, indent=1)), height=300,
                                    key=key)
                ui.keep(key)
                try:
                    overrides[m] = json.loads(text) if text.strip() else {}
                    load_hparams(m, lm, overrides[m])
                except ValueError as exc:
                    errors[m] = f"{label(m)} hyperparameters: {exc}"
                    st.error(f"{errors[m]}. Fix them, or empty the box for the defaults.")
    return overrides, errors


def setup_inputs(lm) -> Setup:
    """The request, the methods with their hyperparameters, and the generations measured."""
    records: list[EvalRecord] = []
    with ui.guard("request"):
        records = request_inputs()
    methods = st.multiselect("Methods", names(), ui.kept(K.METHODS, names()),
                             format_func=label, key=K.METHODS)
    with ui.guard("operating points"):
        points_section(lm, methods)
    overrides, errors = hparams_inputs(lm, methods)
    c1, c2 = st.columns(2)
    n_gen = c1.number_input("Generations per request", 0, 5, ui.kept(K.NGEN, 1), key=K.NGEN)
    gen_tokens = c2.number_input("Tokens per generation", 5, 100, ui.kept(K.GENTOKENS, 30), key=K.GENTOKENS)
    ui.keep(K.METHODS, K.NGEN, K.GENTOKENS)
    return Setup(lm, records, methods, overrides, errors, int(n_gen), int(gen_tokens))


def show_estimate(s: Setup, box) -> None:
    """The run's time estimate (drawn again after a run: its statistics and edit timings are then known)."""
    if s.records and s.methods:
        with box.container(), ui.guard("time estimate"):
            valid = {m: o for m, o in s.overrides.items() if m not in s.errors}
            st.caption("Time: " + estimate(s.lm, s.methods, len(s.records), valid)[1])


def run_section(s: Setup) -> None:
    """The time estimate and the run: every method from the same weights (base + this session's kept
    edits)."""
    box = st.empty()
    show_estimate(s, box)
    ui.cancelled_note()
    if st.button("Edit and compare", type="primary", key=K.RUN, disabled=not (s.records and s.methods)):
        with ui.guard("editing"):
            ui.refuse(s.errors, s.methods)
            job = Item(compare_methods, (s.methods, s.records, s.overrides, s.n_gen, s.gen_tokens),
                       progress=True)
            memory = edit_ram(s.lm, s.methods, len(s.records), s.overrides)
            st.session_state[K.OUT] = ui.run_item(JOB, s.lm, job, batch=len(s.records),
                                                  memory=memory, new_tokens=s.gen_tokens if s.n_gen else None)
            st.session_state.pop(K.TRACES, None)
            show_estimate(s, box)  # not "No estimate yet" above the results of the run that timed it


# ---- results -----------------------------------------------------------------------------------------------
def show_metrics(lm, out: Comparison):
    st.subheader("Metrics")
    st.markdown(
        "Efficacy: the new target beats the true one on the rewrite prompt, 1[P(o*) > P(o_c)]; "
        "generalization: the same on paraphrases; specificity: the true target still wins on neighborhood "
        "prompts (other subjects). Score = harmonic mean of the three. Fluency = weighted bi-/tri-gram "
        "entropy of generated text ×100 (repetition lowers it); consistency = TF-IDF cosine with reference "
        "text about the new target ×100 (only for CounterFact records). Reliability/generalization (acc) are "
        "EasyEdit's teacher-forced token accuracies. Generation efficacy / generalization (QAEdit): the "
        "greedy continuation of the rewrite / paraphrase prompts says the new target and no longer the true "
        "one, what a user actually reads.")
    df = out.to_frame()
    st.markdown(f"**Who did best.** {conclusion(out).sentence()}")
    unfit = unfit_neighbours(out)
    if unfit:
        st.warning(unfit)
    # every measure's row on screen (the default height hid the last rows)
    st.dataframe(pd.DataFrame(by_column(figures.metrics_table(out))), hide_index=True,
                 width="stretch", height="content")
    st.caption("One column per method, so every measure is on screen. Each measure names its "
               "family: " + legend())
    what = "; ".join(f"{r.rewrite} → {r.target_new}" for r in out.requests)
    ui.keep_buttons(lm, out.deltas, {m: label(m) for m in out.deltas}, what,
                    {"model": lm.name, "requests": [r.to_dict() for r in out.requests]})
    return df


def unfit_neighbours(out: Comparison) -> str:
    """Neighbour prompts on which the unedited model already prefers the new target to the true one: a
    neighbour counts as kept only while the true answer wins, so these start at specificity 0 and can show
    no harm the edit does (the second walk wrote 'The Gateway of India is located in the city of' beside
    the Taj Mahal moved from Agra to Mumbai)."""
    said = []
    for r, pre in zip(out.requests, out.pre):
        if not r.target_true:
            continue
        bad = [row["prompt"] for row in pre["probabilities"].get("neighborhood", [])
               if row["p_new"] >= row["p_true"]]
        if bad:
            n = len(pre["probabilities"]["neighborhood"])
            said.append(f"{len(bad)} of {n} neighbour prompt(s) of {r.subject!r} already prefer "
                        f"{r.target_new.strip()!r} to {r.target_true.strip()!r} before any edit ("
                        + "; ".join(repr(ui.clip(b, 60)) for b in bad[:2]) + ")")
    if not said:
        return ""
    return ("; ".join(said) + ". Specificity counts a neighbour as kept only while the true answer wins, so "
            "these measure no harm: give neighbours whose answer is the true target.")


def show_probabilities(out: Comparison) -> None:
    st.subheader("P(new) vs P(true), prompt by prompt")
    st.markdown("Teacher-forced probability of each target after each prompt, before and after each edit: "
                "the rewrite and paraphrases should flip to the new target, the neighborhood prompts should "
                "not move. "
                + figures.BARS_KEY)
    for j, req in enumerate(out.requests):
        if len(out.requests) > 1:
            st.markdown(f"**{req.rewrite}** → {req.target_new!r}")
        for col, group in zip(st.columns(len(figures.GROUPS)), figures.GROUPS):
            fig = out.figure(group, j)
            if fig is None:
                col.caption(f"no {group} prompts")
                continue
            col.plotly_chart(fig, width="stretch", key=K.bars(j, group))
            col.caption(figures.prompt_list(out, j, group))


def show_changes(out: Comparison) -> None:
    st.subheader("How big is the change? ‖ΔW‖ / ‖W‖ per edited matrix")
    st.markdown("The Frobenius norm of each matrix's change relative to the matrix: a small number means a "
                "surgical edit, a large one a risk for everything else the matrix stores. When one method's "
                "change is over 20x another's the axis is logarithmic (its title says so), so the smallest "
                "bars still show: equal steps on it are equal ratios.")
    st.plotly_chart(out.norms_figure(), width="stretch", key=K.NORMS)
    diagnostics = out.diagnostics()
    # the method's column medium: a small one cut "Co-edit (MEMIT + implied)" to "Co-edit (MEMIT + implie"
    st.dataframe(diagnostics, hide_index=True, width="stretch",
                 column_config={"method": st.column_config.TextColumn(width="medium")})
    if (diagnostics == figures.NOT_APPLICABLE).to_numpy().any():
        st.caption(figures.DIAGNOSTICS_BLANK)
    with st.expander("Optimisation loss curves"):
        st.plotly_chart(out.loss_figure(), width="stretch", key=K.LOSSES)


def show_generations(out: Comparison) -> None:
    if not any(p["generations"] for p in out.pre):
        return
    st.subheader("Generations before and after")
    st.caption("Sampled (top-k 5) with the same seed before and after, so differences come from the edit.")
    for j, pre in enumerate(out.pre):
        for g_i, g in enumerate(pre["generations"]):
            cols = st.columns(1 + len(out.methods))
            cols[0].markdown(f"**before**\n\n{ui.continuation(g['text'])}")
            for col, m in zip(cols[1:], out.methods.values()):
                text = m.post[j]["generations"][g_i]["text"]
                col.markdown(f"**{m.label}**\n\n{ui.continuation(text)}")
                if text == g["text"]:
                    col.caption("⚠ word for word the same as before: this edit did not change the "
                                "continuation.")


def show_traces(lm, out: Comparison) -> None:
    st.subheader("Where does the new fact live? Causal trace of the edited model")
    st.markdown("The hidden-state trace of the rewrite prompt in each edited model, with the new target as "
                "the answer: after a working edit, restoring the edited layers' states at the subject's last "
                "token should recover P(new target).")
    samples = st.number_input("Noise samples", 2, 20, 5, key=K.TRACE_SAMPLES)
    if st.button("Trace the edited models", key=K.TRACE_GO):
        with ui.guard("tracing the edited models"):
            req, deltas = out.requests[0], out.deltas

            def trace_job(progress):
                traces = {}
                for i, m in enumerate(m for m in out.methods if deltas.get(m)):
                    with ui.session(lm, deltas[m]):
                        spec = TraceSpec(req.rewrite, req.subject, req.target_new, int(samples),
                                         kinds="hidden")
                        r = trace(lm, spec, progress=lambda f, msg, i=i: progress((i + f) / len(deltas), msg))
                    traces[m] = r["hidden"]
                return traces

            memory = trace_ram(lm, req.rewrite, int(samples), ["hidden"])
            st.session_state[K.TRACES] = ui.run_job("trace of the edited models", trace_job, memory=memory,
                                                       samples=int(samples))
    traces = list((st.session_state.get(K.TRACES) or {}).items())
    for row in range(0, len(traces), 3):  # three to a row: a heatmap needs the room for its token labels
        for col, (m, r) in zip(st.columns(3), traces[row:row + 3]):
            col.plotly_chart(figures.trace_figure(r, label(m)), width="stretch",
                             key=K.trace(m))


def show_notes(lm, out: Comparison) -> None:
    """Beside the metrics: each method's notes (a rewrite it does not win and the likely reason; co-edit with
    nothing implied to write) and, where its knob has a shipped trade-off, the operating point it ran at."""
    for name, m in out.methods.items():
        for d in m.result.diagnostics:
            st.warning(f"**{m.label}**: {ui.md_escape(str(d))}")
        points = points_of(lm, name)
        if points is not None:
            st.caption(f"**{m.label}**'s operating point: {points.ran_at(m.result.hparams)}")


def show_results(lm, out: Comparison) -> None:
    """Every view of one comparison (kept in the session until the next run)."""
    df = show_metrics(lm, out)
    show_notes(lm, out)
    show_probabilities(out)
    show_changes(out)
    show_generations(out)
    show_traces(lm, out)
    d1, d2 = st.columns(2)
    d1.download_button("Download results (JSON)", json.dumps(out.to_json(), indent=1, default=str),
                       "edit_compare.json", "application/json", key=K.JSON)
    d2.download_button("Download metrics (CSV)", df.to_csv(index=False), "edit_compare.csv", "text/csv",
                       key=K.CSV)
    model_download(lm, out)


def results_section(s: Setup) -> None:
    """The last comparison's views, with a note when the request above is not the one they are for."""
    out = st.session_state.get(K.OUT)
    if out:
        if s.records and [r.request.to_dict() for r in s.records] != [r.to_dict() for r in out.requests]:
            shown = "; ".join(f"{r.rewrite} → {r.target_new.strip()}" for r in out.requests)
            st.caption(f"The results below are for the last run ({ui.md_escape(ui.clip(shown, 200))}), not "
                       "for the request above: press **Edit and compare** to run it.")
        waited = ui.waited(JOB)
        if waited:
            st.caption(f"This run: {waited}.")
        show_results(s.lm, out)
    else:
        st.info("Enter a request, pick methods and press **Edit and compare**.")


def main() -> None:
    intro()
    lm = ui.model_picker()
    if lm is None:
        return
    s = setup_inputs(lm)
    run_section(s)
    results_section(s)
    sections.spectrum_section(lm)
    sections.lifelong_section(s)
    sections.bleed_section(s)
    sections.ripple_section(s)
    report_section(st.session_state.get(K.OUT))
    sections.sweep_section(s)


if __name__ == "__main__":  # Streamlit runs a page file as a script: see ui.script_run
    ui.script_run(__file__, main)
