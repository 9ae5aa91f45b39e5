"""Edit & compare: one request (or a few), ROME, MEMIT and PMET on the same base weights, every side effect visible."""
import json

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from editkit.editing.api import run_edit
from editkit.editing.hparams import load_hparams
from editkit.editing.methods import all_methods
from editkit.editing.probe import edit_probabilities
from editkit.editing.requests import EditRequest
from editkit.errors import EditkitError
from editkit.evaluation import EvalRecord, compare_measurements, load_eval_set, measure, sequential
from editkit.evaluation.evaluate import wikitext_idf
from editkit.tracing import trace
from app_pages import ui

METHODS = {m.name: m.label for m in all_methods()}
COLORS = {m.name: m.color for m in all_methods()}

st.title("Edit & compare")
st.markdown(
    "Rewrite a fact with three locate-then-edit methods and compare what else changed. Each method turns the "
    "request into a weight change ΔW of the feed-forward down-projections: ROME one layer with a rank-one update, "
    "MEMIT and PMET several layers with a least-squares update that keeps other keys' outputs "
    r"(ΔW = R Kᵀ (λC + K Kᵀ)⁻¹). Every method starts from the same base weights, and your edits exist only "
    "inside your own computations: other users of this server never see them."
)
lm = ui.model_picker()
if lm is None:
    st.stop()


def _lines(text: str) -> list[str]:
    return [l.strip() for l in text.splitlines() if l.strip()]


# ---- the request ------------------------------------------------------------------------------------------------
source = st.radio("Request", ["Write my own", "Pick from CounterFact"], horizontal=True, key="ec_source")
records: list[EvalRecord] = []
with ui.guard("request"):
    if source == "Pick from CounterFact":
        shipped = load_eval_set("counterfact")
        labels = [f"{r.request.case_id}: {r.request.rewrite} {r.request.target_true.strip()} → "
                  f"{r.request.target_new.strip()}" for r in shipped]
        picked = st.multiselect("Records (several make a batch: ROME applies them one after another, MEMIT and "
                                "PMET at once)", range(len(shipped)), default=[0], format_func=lambda i: labels[i],
                                key="ec_records")
        records = [shipped[i] for i in picked]
    else:
        c1, c2 = st.columns(2)
        prompt = c1.text_input("Prompt with {} for the subject", "The mother tongue of {} is", key="ec_prompt")
        subject = c2.text_input("Subject", "Danielle Darrieux", key="ec_subject")
        c3, c4 = st.columns(2)
        target_new = c3.text_input("New target", "English", key="ec_new")
        target_true = c4.text_input("True target (optional)", "French", key="ec_true")
        c5, c6, c7 = st.columns(3)
        para = c5.text_area("Paraphrase prompts (one per line)",
                            "Danielle Darrieux, a native speaker of\nWhere Danielle Darrieux grew up, people speak",
                            key="ec_para")
        neigh = c6.text_area("Neighborhood prompts (unrelated subjects, same relation)",
                             "The mother tongue of Jean Gabin is\nThe mother tongue of Catherine Deneuve is",
                             key="ec_neigh")
        gen = c7.text_area("Generation prompts", "Danielle Darrieux's mother tongue is", key="ec_gen")
        records = [EvalRecord(EditRequest(prompt, subject, target_new, target_true or None, _lines(para),
                                          _lines(neigh), _lines(gen), case_id="custom"))]

# ---- methods and hyperparameters ----------------------------------------------------------------------------------
methods = st.multiselect("Methods", list(METHODS), list(METHODS), format_func=METHODS.get, key="ec_methods")
overrides: dict = {}
hp_errors: dict[str, str] = {}
with st.expander("Hyperparameters (per-model defaults from assets/hparams; edit the JSON to override)"):
    cols = st.columns(max(len(methods), 1))
    for col, m in zip(cols, methods):
        with col, ui.guard(f"{METHODS[m]} hyperparameters"):
            default = {k: v for k, v in load_hparams(m, lm).to_dict().items() if k not in ("source",)}
            text = st.text_area(METHODS[m], json.dumps(default, indent=1), height=300, key=f"ec_hp_{m}")
            try:  # malformed JSON, unknown keys, NaN or out-of-range values are said here, and block the run
                overrides[m] = json.loads(text) if text.strip() else {}
                load_hparams(m, lm, overrides[m])
            except ValueError as exc:
                hp_errors[m] = f"{METHODS[m]} hyperparameters: {exc}"
                st.error(f"{hp_errors[m]}. Fix them, or empty the box for the defaults.")
c1, c2 = st.columns(2)
n_gen = c1.number_input("Generations per request", 0, 5, 1, key="ec_ngen")
gen_tokens = c2.number_input("Tokens per generation", 5, 100, 30, key="ec_gentokens")

ui.cancelled_note()
if st.button("Edit and compare", type="primary", key="ec_run", disabled=not (records and methods)):
    with ui.guard("editing"):
        if hp_errors:
            raise EditkitError(next(iter(hp_errors.values())))
        requests = [r.request for r in records]
        idf = wikitext_idf()

        def job(progress):  # every method starts from the same weights: base + this session's kept edits
            progress(0.0, "measuring the model before the edit")
            with ui.session(lm):
                pre = [measure(lm, r, int(n_gen), int(gen_tokens)) for r in records]
                pre_p = [edit_probabilities(lm, r) for r in requests]
            out = {"requests": [r.to_dict() for r in requests],
                   "pre_generations": [p["generations"] for p in pre], "pre_probabilities": pre_p, "methods": {}}
            deltas = {}
            for i, m in enumerate(methods):
                def step(f, msg, i=i, m=m):
                    progress(min((i + 0.8 * f) / len(methods), 1.0), f"{METHODS[m]}: {msg}")
                with ui.session(lm):
                    result = run_edit(lm, m, requests, overrides.get(m), progress=step)
                step(1.0, "measuring the edited model")
                with ui.session(lm, result.delta):
                    post = [measure(lm, r, int(n_gen), int(gen_tokens)) for r in records]
                    post_p = [edit_probabilities(lm, r) for r in requests]
                metrics = [compare_measurements(a, b, r, idf) for a, b, r in zip(pre, post, records)]
                out["methods"][m] = {"seconds": result.seconds, "info": result.to_dict()["info"],
                                     "metrics": metrics, "post_probabilities": post_p,
                                     "post_generations": [p["generations"] for p in post]}
                deltas[m] = result.delta
            return out, deltas

        out, deltas = ui.run_job("edit and compare", job, batch=len(requests),
                                 new_tokens=int(gen_tokens) if int(n_gen) else None)
        st.session_state["ec_deltas"] = deltas
        st.session_state["ec_out"] = out
        st.session_state.pop("ec_traces", None)

def show_results(out: dict) -> None:
    """Every view of one comparison (kept in the session until the next run)."""
    # ---- metrics table ------------------------------------------------------------------------------------------------
    st.subheader("Metrics")
    st.markdown(
        "Efficacy: the new target beats the true one on the rewrite prompt, 1[P(o*) > P(o_c)]; generalization: the same "
        "on paraphrases; specificity: the true target still wins on neighborhood prompts (other subjects). Score = "
        "harmonic mean of the three. Fluency = weighted bi-/tri-gram entropy of generated text ×100 (repetition lowers "
        "it); consistency = TF-IDF cosine with reference text about the new target ×100 (only for CounterFact records). "
        "Reliability/generalization (acc) are EasyEdit's teacher-forced token accuracies."
    )
    KEYS = [("efficacy", "Efficacy"), ("generalization", "Generalization"), ("specificity", "Specificity"),
            ("score", "Score"), ("efficacy_magnitude", "Efficacy magn."), ("specificity_magnitude", "Specificity magn."),
            ("fluency", "Fluency"), ("consistency", "Consistency"), ("reliability", "Reliability (acc)"),
            ("generalization_acc", "Generalization (acc)")]


    def _avg(metrics: list[dict], key: str):
        vals = [m[key] for m in metrics if m.get(key) is not None and m[key] == m[key]]
        return round(100 * sum(vals) / len(vals), 1) if vals else None


    table = []
    first = next(iter(out["methods"].values()))
    table.append({"method": "before edit", **{label: _avg(first["metrics"], "pre_" + k) for k, label in KEYS},
                  "time (s)": None})
    for m, r in out["methods"].items():
        table.append({"method": METHODS[m], **{label: _avg(r["metrics"], "post_" + k) for k, label in KEYS},
                      "time (s)": round(r["seconds"], 1)})
    df = pd.DataFrame(table)
    st.dataframe(df, hide_index=True, width="stretch")
    what = "; ".join(f"{r['prompt'].replace('{}', r['subject'])} → {r['target_new']}" for r in out["requests"])
    ui.keep_buttons(lm, st.session_state.get("ec_deltas", {}), METHODS, what,
                    {"model": lm.name, "requests": out["requests"]})

    # ---- probabilities -------------------------------------------------------------------------------------------------
    st.subheader("P(new) vs P(true), prompt by prompt")
    st.markdown("Teacher-forced probability of each target after each prompt, before and after each edit: the rewrite "
                "and paraphrases should flip to the new target, the neighborhood prompts should not move.")
    groups = ("rewrite", "paraphrase", "neighborhood")
    for j, req in enumerate(out["requests"]):
        if len(out["requests"]) > 1:
            st.markdown(f"**{req['prompt'].replace('{}', req['subject'])}** → {req['target_new']!r}")
        cols = st.columns(len(groups))
        for col, group in zip(cols, groups):
            rows = out["pre_probabilities"][j][group]
            if not rows:
                col.caption(f"no {group} prompts")
                continue
            fig = go.Figure()
            x = [f"{i + 1}" for i in range(len(rows))]
            fig.add_trace(go.Bar(x=x, y=[r["p_new"] for r in rows], name="before: new", marker_color="#bbbbbb"))
            for m, r in out["methods"].items():
                post = r["post_probabilities"][j][group]
                fig.add_trace(go.Bar(x=x, y=[p["p_new"] for p in post], name=f"{METHODS[m]}: new",
                                     marker_color=COLORS[m]))
                if post and "p_true" in post[0]:
                    fig.add_trace(go.Scatter(x=x, y=[p["p_true"] for p in post], name=f"{METHODS[m]}: true",
                                             mode="markers", marker={"color": COLORS[m], "symbol": "x", "size": 10}))
            if "p_true" in rows[0]:
                fig.add_trace(go.Scatter(x=x, y=[r["p_true"] for r in rows], name="before: true", mode="markers",
                                         marker={"color": "black", "symbol": "x", "size": 10}))
            fig.update_layout(title=group, barmode="group", yaxis_title="probability", xaxis_title="prompt #",
                              height=330, margin={"t": 40, "b": 30}, legend={"font": {"size": 9}})
            col.plotly_chart(fig, width="stretch", key=f"ec_bars_{j}_{group}")
            col.caption(" · ".join(f"#{i + 1} {r['prompt'][:50]!r}" for i, r in enumerate(rows)))

    # ---- weight changes -------------------------------------------------------------------------------------------------
    st.subheader("How big is the change? ‖ΔW‖ / ‖W‖ per edited matrix")
    fig = go.Figure()
    for m, r in out["methods"].items():
        norms = r["info"]["norms"]
        fig.add_trace(go.Bar(x=[k.replace(".weight", "") for k in norms], y=[v["relative_norm"] for v in norms.values()],
                             name=METHODS[m], marker_color=COLORS[m]))
    fig.update_layout(barmode="group", yaxis_title="‖ΔW‖_F / ‖W‖_F", height=320, margin={"t": 20})
    st.plotly_chart(fig, width="stretch", key="ec_norms")
    diag = []
    for m, r in out["methods"].items():
        info = r["info"]
        extra = {"time (s)": round(r["seconds"], 2)}
        if "target_reached" in info:
            extra["target reached (per request)"] = ", ".join(f"{x:.2f}" for x in info["target_reached"])
        if info.get("requests") and "division_factor" in info["requests"][0]:
            extra["ROME division factor"] = round(info["requests"][0]["division_factor"], 4)
        steps = [len(q["losses"]) for q in info.get("requests", [])]
        extra["optimisation steps"] = ", ".join(map(str, steps))
        diag.append({"method": METHODS[m], **extra})
    st.dataframe(pd.DataFrame(diag), hide_index=True, width="stretch")
    with st.expander("Optimisation loss curves"):
        fig = go.Figure()
        for m, r in out["methods"].items():
            for q in r["info"].get("requests", []):
                fig.add_trace(go.Scatter(y=[l["loss"] for l in q["losses"]], name=f"{METHODS[m]} {q.get('case_id')}",
                                         line={"color": COLORS[m]}))
        fig.update_layout(xaxis_title="step", yaxis_title="loss", height=300)
        st.plotly_chart(fig, width="stretch", key="ec_losses")

    # ---- generations ---------------------------------------------------------------------------------------------------
    if any(out["pre_generations"]):
        st.subheader("Generations before and after")
        st.caption("Sampled (top-k 5) with the same seed before and after, so differences come from the edit.")
        for j, gens in enumerate(out["pre_generations"]):
            for g_i, g in enumerate(gens):
                cols = st.columns(1 + len(out["methods"]))
                cols[0].markdown(f"**before**\n\n{g['text']}")
                for col, (m, r) in zip(cols[1:], out["methods"].items()):
                    col.markdown(f"**{METHODS[m]}**\n\n{r['post_generations'][j][g_i]['text']}")

    # ---- where does the new fact live? ------------------------------------------------------------------------------------
    st.subheader("Where does the new fact live? Causal trace of the edited model")
    st.markdown("The hidden-state trace of the rewrite prompt in each edited model, with the new target as the answer: "
                "after a working edit, restoring the edited layers' states at the subject's last token should recover "
                "P(new target).")
    samples = st.number_input("Noise samples", 2, 20, 5, key="ec_trace_samples")
    if st.button("Trace the edited models", key="ec_trace_go"):
        with ui.guard("tracing the edited models"):
            req = out["requests"][0]

            def trace_job(progress):
                traces = {}
                for i, m in enumerate(out["methods"]):
                    delta = st.session_state.get("ec_deltas", {}).get(m)
                    if delta is None:
                        continue
                    with ui.session(lm, delta):
                        r = trace(lm, req["prompt"].replace("{}", req["subject"]), req["subject"],
                                  req["target_new"], kinds="hidden", samples=int(samples),
                                  progress=lambda f, msg, i=i: progress((i + f) / len(out["methods"]), msg))
                    traces[m] = r["hidden"].to_dict()
                return traces

            st.session_state["ec_traces"] = ui.run_job("trace of the edited models", trace_job,
                                                       samples=int(samples))
    traces = st.session_state.get("ec_traces")
    if traces:
        cols = st.columns(len(traces))
        for col, (m, r) in zip(cols, traces.items()):
            b, e = r["subject_range"]
            labels = [f"{i}: {t!r}{'*' if b <= i < e else ''}" for i, t in enumerate(r["tokens"])]
            fig = go.Figure(go.Heatmap(z=r["scores"], y=labels, colorscale="Purples", zmin=r["low_score"],
                                       colorbar={"title": "p"}))
            fig.update_yaxes(autorange="reversed")
            fig.update_layout(title=f"{METHODS[m]}: p({r['answer']!r})", xaxis_title="layer",
                              height=140 + 26 * len(labels), margin={"t": 40})
            col.plotly_chart(fig, width="stretch", key=f"ec_trace_{m}")

    # ---- downloads -------------------------------------------------------------------------------------------------------
    d1, d2 = st.columns(2)
    d1.download_button("Download results (JSON)", json.dumps(out, indent=1, default=str), "edit_compare.json",
                       "application/json", key="ec_json")
    d2.download_button("Download metrics (CSV)", df.to_csv(index=False), "edit_compare.csv", "text/csv", key="ec_csv")



out = st.session_state.get("ec_out")
if out:
    show_results(out)
else:
    st.info("Enter a request, pick methods and press **Edit and compare**.")

# ---- sequential stress -----------------------------------------------------------------------------------------------
st.subheader("Sequential editing stress")
st.markdown("Apply CounterFact edits one after another, each on top of the last, and watch whether earlier edits "
            "survive (retention: the share of earlier edits that worked and still work) and whether the model stays "
            "a language model (perplexity on 512 held-out WikiText tokens, relative to the unedited model).")
c1, c2 = st.columns(2)
seq_method = c1.selectbox("Method", list(METHODS), format_func=METHODS.get, key="ec_seq_method")
seq_n = c2.number_input("Edits", 2, 50, 5, key="ec_seq_n")
if st.button("Run sequential edits", key="ec_seq_go"):
    with ui.guard("sequential editing"):
        if seq_method in hp_errors:
            raise EditkitError(hp_errors[seq_method])
        def seq_job(progress):
            with ui.session(lm):
                return sequential(lm, seq_method, load_eval_set("counterfact", int(seq_n)),
                                  overrides.get(seq_method), ppl_tokens=512, progress=progress)

        st.session_state["ec_seq"] = ui.run_job("sequential editing", seq_job, sequential=int(seq_n))
seq = st.session_state.get("ec_seq")
if seq:
    rows = seq["rows"]
    x = [r["edit"] for r in rows]
    fig = go.Figure()
    for key, color in (("efficacy", "#008837"), ("generalization", "#7b3294"), ("specificity", "#e66101"),
                       ("retention", "#0571b0")):
        if key in rows[0]:
            fig.add_trace(go.Scatter(x=x, y=[r[key] for r in rows], name=key, line={"color": color}))
    fig.add_trace(go.Scatter(x=x, y=[r["perplexity"] / seq["base_perplexity"] for r in rows],
                             name="perplexity / base", yaxis="y2", line={"dash": "dot", "color": "black"}))
    fig.update_layout(xaxis_title="edits applied", yaxis={"title": "rate over edits so far", "range": [0, 1.05]},
                      yaxis2={"title": "perplexity / base", "overlaying": "y", "side": "right"}, height=360,
                      title=f"{METHODS[seq['method']]}, base perplexity {seq['base_perplexity']:.2f}")
    st.plotly_chart(fig, width="stretch", key="ec_seq_fig")
    collapsed = [r for r in rows if r["collapsed"]]
    if collapsed:
        st.warning(f"The model collapsed at edit {collapsed[0]['edit']}: {collapsed[0]['reason']}.")
