"""Edit & compare: one request (or a few), ROME, MEMIT and PMET on the same base weights, every side effect visible."""
import json

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from editkit import isolation
from editkit.editing.api import run_edit
from editkit.editing.hparams import load_hparams
from editkit.editing.methods import all_methods
from editkit.editing.probe import edit_probabilities
from editkit.editing.requests import EditRequest
from editkit.evaluation import EvalRecord, compare_measurements, load_eval_set, measure, sequential
from editkit.evaluation.evaluate import wikitext_idf
from editkit.tracing import trace
from pages import ui

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
source = st.radio("Request", ["Write my own", "Pick from CounterFact", "Upload my records"], horizontal=True,
                  key="ec_source")
records: list[EvalRecord] = []
with ui.guard("request"):
    if source == "Upload my records":  # CounterFact, EasyEdit or zsRE records; errors name the record
        from editkit.evaluation.datasets import save_upload

        up = st.file_uploader("A .json / .jsonl file of CounterFact, EasyEdit or zsRE records",
                              type=["json", "jsonl"], key="ec_upload")
        mine = load_eval_set(str(save_upload(up.name, up.getvalue()))) if up is not None else []
        picked = st.multiselect("Records", range(len(mine)), default=[0] if mine else [], key="ec_upload_records",
                                format_func=lambda i: f"{mine[i].request.case_id}: {mine[i].request.rewrite} → "
                                                      f"{mine[i].request.target_new.strip()}")
        records = [mine[i] for i in picked]
    elif source == "Pick from CounterFact":
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
with st.expander("Hyperparameters (per-model defaults from assets/hparams; edit the JSON to override)"):
    cols = st.columns(max(len(methods), 1))
    for col, m in zip(cols, methods):
        with col, ui.guard(f"{METHODS[m]} hyperparameters"):
            default = {k: v for k, v in load_hparams(m, lm).to_dict().items() if k not in ("source",)}
            text = st.text_area(METHODS[m], json.dumps(default, indent=1), height=300, key=f"ec_hp_{m}")
            try:
                overrides[m] = json.loads(text)
            except ValueError as exc:
                st.error(f"{METHODS[m]}: not valid JSON ({exc}); the defaults are used")
c1, c2 = st.columns(2)
n_gen = c1.number_input("Generations per request", 0, 5, 1, key="ec_ngen")
gen_tokens = c2.number_input("Tokens per generation", 5, 100, 30, key="ec_gentokens")

if st.button("Edit and compare", type="primary", key="ec_run", disabled=not (records and methods)):
    with ui.guard("editing"):
        requests = [r.request for r in records]
        bar = st.progress(0.0, text="measuring the base model")
        idf = wikitext_idf()
        with isolation.session(lm):
            pre = [measure(lm, r, int(n_gen), int(gen_tokens)) for r in records]
            pre_p = [edit_probabilities(lm, r) for r in requests]
        out = {"requests": [r.to_dict() for r in requests], "pre_generations": [p["generations"] for p in pre],
               "pre_probabilities": pre_p, "methods": {}}
        for i, m in enumerate(methods):
            def step(f, msg, i=i):
                bar.progress(min((i + 0.8 * f) / len(methods), 1.0), text=f"{METHODS[m]}: {msg}")
            with isolation.session(lm):
                result = run_edit(lm, m, requests, overrides.get(m), progress=step)
            step(1.0, "measuring the edited model")
            with isolation.session(lm, result.delta):
                post = [measure(lm, r, int(n_gen), int(gen_tokens)) for r in records]
                post_p = [edit_probabilities(lm, r) for r in requests]
            metrics = [compare_measurements(a, b, r, idf) for a, b, r in zip(pre, post, records)]
            out["methods"][m] = {"seconds": result.seconds, "info": result.to_dict()["info"], "metrics": metrics,
                                 "post_probabilities": post_p, "post_generations": [p["generations"] for p in post]}
            st.session_state.setdefault("ec_deltas", {})[m] = result.delta
        st.session_state["ec_out"] = out
        st.session_state.pop("ec_traces", None)
        bar.empty()

def show_results(out: dict) -> None:
    """Every view of one comparison (kept in the session until the next run)."""
    # ---- metrics table ------------------------------------------------------------------------------------------------
    st.subheader("Metrics")
    st.markdown(
        "Efficacy: the new target beats the true one on the rewrite prompt, 1[P(o*) > P(o_c)]; generalization: the same "
        "on paraphrases; specificity: the true target still wins on neighborhood prompts (other subjects). Score = "
        "harmonic mean of the three. Fluency = weighted bi-/tri-gram entropy of generated text ×100 (repetition lowers "
        "it); consistency = TF-IDF cosine with reference text about the new target ×100 (only for CounterFact records). "
        "Reliability/generalization (acc) are EasyEdit's teacher-forced token accuracies. Generation efficacy / "
        "generalization (QAEdit): the greedy continuation of the rewrite / paraphrase prompts says the new target "
        "and no longer the true one, what a user actually reads."
    )
    KEYS = [("efficacy", "Efficacy"), ("generalization", "Generalization"), ("specificity", "Specificity"),
            ("gen_efficacy", "Generation efficacy"), ("gen_generalization", "Generation generalization"),
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
            traces = {}
            bar = st.progress(0.0, text="tracing")
            for i, m in enumerate(out["methods"]):
                delta = st.session_state.get("ec_deltas", {}).get(m)
                if delta is None:
                    continue
                with isolation.session(lm, delta):
                    r = trace(lm, req["prompt"].replace("{}", req["subject"]), req["subject"], req["target_new"],
                              kinds="hidden", samples=int(samples),
                              progress=lambda f, msg, i=i: bar.progress(min((i + f) / len(out["methods"]), 1.0),
                                                                        text=msg))
                traces[m] = r["hidden"].to_dict()
            st.session_state["ec_traces"] = traces
            bar.empty()
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
        bar = st.progress(0.0, text="sequential editing")
        st.session_state["ec_seq"] = sequential(lm, seq_method, load_eval_set("counterfact", int(seq_n)),
                                                overrides.get(seq_method), ppl_tokens=512,
                                                progress=lambda f, msg: bar.progress(min(f, 1.0), text=msg))
        bar.empty()
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


# ---- side effects: why neighbours move, and what another setting would do (issue 15) ------------------------------
def bleed_section(lm, records, overrides) -> None:
    """The bleed map of the first request: measured rise of P(new) on other subjects vs the update's share."""
    from editkit.evaluation.bleed import bleed_map
    from editkit.evaluation.charts import bleed_figure

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
    method = c1.selectbox("Method", list(METHODS), format_func=METHODS.get, key="ec_bleed_method")
    n_facts = c2.number_input("Known facts of the same relation", 0, 50, 15, key="ec_bleed_facts")
    if st.button("Map the bleed of the first request", key="ec_bleed_go"):
        with ui.guard("bleed map"):
            bar = st.progress(0.0, text="editing")
            st.session_state["ec_bleed"] = bleed_map(
                lm, method, records[0].request, overrides.get(method), relation=records[0].relation,
                n_facts=int(n_facts),
                progress=lambda f, m: bar.progress(min(f, 1.0), text=m))
            bar.empty()
    out = st.session_state.get("ec_bleed")
    if not out:
        return
    st.plotly_chart(bleed_figure(out), width="stretch", key="ec_bleed_fig")
    c = out["check"]
    st.caption(f"Check: the predicted change ({out['formula']}) matches the measured change of the edited layer's "
               f"output at every token to {c['max_error']:.1e} of the largest change.")
    rows = [{"source": r["source"], "prompt": r["prompt"], "share s": round(r["share"], 3), "at token": r["token"],
             "P(new) before": round(r["p_new_before"], 3), "P(new) after": round(r["p_new_after"], 3)}
            for r in sorted(out["rows"], key=lambda r: -abs(r["share"]))]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def sweep_section(lm) -> None:
    """A hyperparameter sweep on an evaluation set, drawn as the trade-off it is (Pareto chart)."""
    from editkit.evaluation import EVAL_SETS
    from editkit.evaluation.charts import pareto_figure
    from editkit.evaluation.datasets import save_upload
    from editkit.evaluation.sweep import sweep

    st.subheader("Tune the trade-off: a hyperparameter sweep")
    st.markdown(
        "An edit must win on the rewrite and its paraphrases (efficacy, generalization) without flipping other "
        "subjects (specificity). Settings that push harder, e.g. less weight decay on δ or a larger norm clamp, "
        "help the first two and hurt the third; statistics C that separate keys better help all three. Each point "
        "is one setting evaluated on the same records; outlined points are Pareto-optimal: no other setting is "
        "at least as good on all three rates. Choose settings on a validation set, never on the set you report.")
    st.latex(r"\text{efficacy} = \mathbb{E}\,1[P(o^*) > P(o^c)]\ \text{(rewrite)},\quad "
             r"\text{specificity} = \mathbb{E}\,1[P(o^c) > P(o^*)]\ \text{(neighbours)}")
    c1, c2, c3 = st.columns(3)
    method = c1.selectbox("Method", list(METHODS), format_func=METHODS.get, key="ec_sweep_method")
    choices = list(EVAL_SETS) + ["my own file"]
    set_choice = c2.selectbox("Records", choices, index=choices.index("counterfact-val"), key="ec_sweep_set")
    n = c3.number_input("Records per setting", 1, 1000, 10, key="ec_sweep_n")
    set_name = set_choice
    if set_choice == "my own file":
        up = st.file_uploader("A .json / .jsonl file of CounterFact, EasyEdit or zsRE records",
                              type=["json", "jsonl"], key="ec_sweep_upload")
        set_name = None
        if up is not None:
            with ui.guard("your records"):
                set_name = str(save_upload(up.name, up.getvalue()))
    params = st.text_area("Values to try, one hyperparameter per line: name=v1,v2,... (every combination runs)",
                          "mom2_shrinkage=0,0.3,0.6", key="ec_sweep_params")
    st.caption("Each setting edits every record once (ROME one at a time, the others in batches of 10); settings "
               "that differ only in the statistics or λ reuse the optimized targets, and finished settings are "
               "cached, so a wider grid only computes what is new.")
    if st.button("Run the sweep", key="ec_sweep_go", disabled=set_name is None):
        with ui.guard("sweep"):
            bar = st.progress(0.0, text="sweep")
            st.session_state["ec_sweep"] = sweep(
                lm, method, _lines(params), set_name=set_name, n=int(n),
                progress=lambda f, m: bar.progress(min(f, 1.0), text=m))
            bar.empty()
    out = st.session_state.get("ec_sweep")
    if not out:
        return
    st.plotly_chart(pareto_figure(out, ("efficacy", "generalization", "gen_efficacy")), width="stretch",
                    key="ec_sweep_fig")

    def cell(c):
        return None if c is None or c.get("mean") is None else round(c["mean"], 1)

    rows = [{"setting": r["label"], "Pareto": "★" if r["pareto"] else "", "efficacy": cell(r["efficacy"]),
             "generalization": cell(r["generalization"]), "specificity": cell(r["specificity"]),
             "generation efficacy": cell(r["gen_efficacy"]),
             "score": None if r["score"] is None else round(r["score"], 1), "cached": r.get("cached")}
            for r in out["settings"]]
    u = out["unedited"] or {}
    rows.insert(0, {"setting": "unedited model", "efficacy": cell(u.get("efficacy")),
                    "generalization": cell(u.get("generalization")), "specificity": cell(u.get("specificity")),
                    "generation efficacy": cell(u.get("gen_efficacy"))})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    st.download_button("Download the sweep (JSON)", json.dumps(out, indent=1, default=str), "sweep.json",
                       "application/json", key="ec_sweep_json")


bleed_section(lm, records, overrides)
sweep_section(lm)
