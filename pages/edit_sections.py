"""Edit & compare's studies beyond the one comparison: why AlphaEdit protects old knowledge (the spectrum of the
key statistics), what hundreds of edits in a row do to each method (lifelong editing), why neighbours move (the
bleed map), what an edit should move (ripple effects) and which setting trades what (a hyperparameter sweep).
Each section takes the page's Setup (the request, the methods and their hyperparameters)."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import streamlit as st

from editkit.editing.defaults import load_hparams
from editkit.editing.methods import all_methods, get
from editkit.editing.ram import edit_ram, scoring_ram
from editkit.evaluation import SequentialSpec, load_eval_set
from editkit.evaluation.sequential import sequential_methods
from editkit.figures.editing import by_column
from editkit.runtime.cluster import Item
from pages import ui

LABELS = {m.name: m.label for m in all_methods()}


class K:
    """These sections' session-state keys, each named once."""

    SPEC, SPEC_FIG, SPEC_GO = "ec_spec", "ec_spec_fig", "ec_spec_go"
    SPEC_RULE, SPEC_THRESHOLD = "ec_spec_rule", "ec_spec_threshold"
    LIFE, LIFE_GO, LIFE_METHODS, LIFE_N = "ec_life", "ec_life_go", "ec_life_methods", "ec_life_n"
    LIFE_BATCH, LIFE_FIG, LIFE_LAYERS = "ec_life_batch", "ec_life_fig", "ec_life_layers"
    LIFE_SHIPPED, LIFE_SHIPPED_LAYERS = "ec_life_shipped", "ec_life_shipped_layers"
    LIFE_STAB, LIFE_STAB_LAYERS = "ec_life_stab", "ec_life_stab_layers"
    LIFE_1000, LIFE_1000_LAYERS = "ec_life_1000", "ec_life_1000_layers"
    BLEED, BLEED_FACTS, BLEED_FIG, BLEED_GO, BLEED_METHOD = ("ec_bleed", "ec_bleed_facts", "ec_bleed_fig",
                                                             "ec_bleed_go", "ec_bleed_method")
    RIPPLE, RIPPLE_FIG, RIPPLE_GO = "ec_ripple", "ec_ripple_fig", "ec_ripple_go"
    RIPPLE_MINE, RIPPLE_REF, RIPPLE_REL = "ec_ripple_mine", "ec_ripple_ref", "ec_ripple_rel"
    RIPPLE_GUESS = "ec_ripple_guess"  # the relation guessed for the request the box was set from
    SWEEP, SWEEP_FIG, SWEEP_GO, SWEEP_JSON = "ec_sweep", "ec_sweep_fig", "ec_sweep_go", "ec_sweep_json"
    SWEEP_METHOD, SWEEP_N, SWEEP_PARAMS = "ec_sweep_method", "ec_sweep_n", "ec_sweep_params"
    SWEEP_SET, SWEEP_UPLOAD = "ec_sweep_set", "ec_sweep_upload"


@dataclass
class Setup:
    """What the request and method inputs set up, which every section of the page uses."""

    lm: object
    records: list  # EvalRecord
    methods: list[str]
    overrides: dict  # method -> its hyperparameter overrides
    errors: dict  # method -> why its hyperparameters are refused (a run of it is blocked)
    n_gen: int = 1
    gen_tokens: int = 30


def _lines(text: str) -> list[str]:
    return [l.strip() for l in text.splitlines() if l.strip()]


# ---- AlphaEdit's null space, and what hundreds of edits in a row do to each method -------------------------
def spectrum_section(lm) -> None:
    """The eigenvalues of C = E[k kᵀ] at AlphaEdit's layers, and the null space its rule selects."""
    from editkit.editing.nullspace import NULL_RULES
    from editkit.editing.spectrum import spectrum

    st.subheader("Why AlphaEdit protects old knowledge: the spectrum of the key statistics")
    st.markdown(
        "Keys of ordinary text fill only part of the key space: most eigenvalues of C = E[k kᵀ] are orders "
        "of magnitude below the largest. AlphaEdit projects each update onto the directions with the "
        "smallest eigenvalues (P = U₀U₀ᵀ, ΔW = R K₁ᵀ P (K_p K_pᵀ P + K₁K₁ᵀ P + αI)⁻¹), where ordinary keys "
        "have almost no component, so ΔW k ≈ 0 for them. The *energy* rule puts at most a fraction of E‖k‖² "
        "in that null space, which means the same on any model; upstream's absolute 2e-2 depends on the size "
        "of the activations.")
    c1, c2 = st.columns(2)
    rules = list(NULL_RULES)
    default = load_hparams("alphaedit", lm)
    rule = c1.selectbox("Null-space rule", rules, index=rules.index(default.nullspace_rule), key=K.SPEC_RULE,
                        help="; ".join(f"{k}: {v}" for k, v in NULL_RULES.items()))
    threshold = c2.number_input("Threshold", min_value=1e-6, max_value=1e3,
                                value=float(default.nullspace_threshold), format="%.4g", key=K.SPEC_THRESHOLD)
    if st.button("Show the spectrum", key=K.SPEC_GO):
        with ui.guard("spectrum"), st.spinner("eigendecomposition of C (cached after the first time)"):
            st.session_state[K.SPEC] = spectrum(lm, rule=rule, threshold=float(threshold))
    spec = st.session_state.get(K.SPEC)
    if spec and spec.model == lm.name:
        st.plotly_chart(spec.figure(), width="stretch", key=K.SPEC_FIG)
        st.dataframe(pd.DataFrame([{"layer": r.layer, "null-space dimension": f"{r.null_dimension}/{r.width}",
                                    "share of E‖k‖² inside": f"{100 * r.null_energy:.2f}%",
                                    "eigenvalue cut": r.cut, "largest eigenvalue": r.largest,
                                    "upstream 2e-2: dimension": r.upstream_null_dimension,
                                    "upstream 2e-2: share of E‖k‖²": f"{100 * r.upstream_null_energy:.2f}%"}
                                   for r in spec.layers]), hide_index=True, width="stretch")


def lifelong_section(s: Setup) -> None:
    """Lifelong editing: the shipped run's curves (500 edits), and a short run of your own."""
    from editkit.figures.labels import legend

    st.subheader("Lifelong editing: hundreds of edits, one batch after another")
    st.markdown(
        "Each batch of CounterFact edits is computed on the weights the earlier batches left. After each "
        "batch: efficacy, generalization and specificity of all edits so far, retention (earlier edits that "
        "worked and still work), fluency of generated text on fixed prompts, WikiText perplexity and the "
        "size of the accumulated ‖ΔW‖. Batch t is solved at W_t = W_0 + ΔW_1 + … + ΔW_(t-1); retention = the "
        "share of earlier edits with P(new) > P(true) right after their batch that still have it. Batch size "
        "1 is the classic sequential stress test. ROME collapses in this setting; AlphaEdit's claim is that "
        "it does not. Locality is measured against the ORIGINAL model: its answers on the neighborhood "
        "prompts are cached before the first edit, and 'kept' / 'locality' are the shares of those answers "
        "(P(true) > P(new); argmax tokens) the edits left unchanged. Headers tag each metric's "
        "family: " + legend())
    shipped_section()
    own_run_section(s)


def shipped_section() -> None:
    """The shipped lifelong runs: 500 edits, the stabilisers' 120 and 1,000 edits in batches of 100."""
    from editkit.evaluation.lifelong import SHIPPED, SHIPPED_1000, SHIPPED_STABILISERS

    if SHIPPED.exists():
        with ui.guard("the shipped run"):
            shipped, parts = shipped_runs(str(SHIPPED), SHIPPED.stat().st_mtime)
            first = next(iter(shipped.values()))
            st.caption(f"Shipped run on {first.model}: {first.n} CounterFact edits; {first.notes}")
            draw_parts(parts, (K.LIFE_SHIPPED, K.LIFE_SHIPPED_LAYERS))
            unshipped_note(shipped)
    if SHIPPED_STABILISERS.exists():
        title = "Stabilisers against ROME's collapse (120 edits, shipped run)"
        with st.expander(title), ui.guard("the stabilisers' run"):
            st.markdown(
                "Fixes for the collapse limit how far each edit pushes. ENCORE's early stop ends the target "
                "optimisation at the second step where the new target is on top, and editkit's shift bound "
                "keeps the target shift ‖v* − v‖ ≤ b (ENCORE's own norm constraint acts on MEMIT's update: "
                "the 1,000-edit run below); NAS rescales every value vector to one anchor norm, v* ← n̄ "
                "v*/‖v*‖. Watch ‖ΔW‖/‖W‖ and the condition number cond(W + ΔW) = σ_max/σ_min: with the "
                "defaults they climb before the perplexity does, and ROME collapses at edit 100 (perplexity "
                "> 2x); with either stabiliser they stay flat.")
            draw_parts(shipped_runs(str(SHIPPED_STABILISERS), SHIPPED_STABILISERS.stat().st_mtime)[1],
                       (K.LIFE_STAB, K.LIFE_STAB_LAYERS))
    if SHIPPED_1000.exists():
        with st.expander("1,000 edits in batches of 100 (shipped run)"), ui.guard("the 1,000-edit run"):
            st.markdown(
                "Every batch method over the first 1,000 records of counterfact-edit, 100 per batch, and "
                "MEMIT and AlphaEdit with a stabiliser, drawn dashed in their method's colour: NAS rescales "
                "every value vector to the norm its unedited edits have, v* ← n̄ v*/‖v*‖; the shift bound "
                "keeps each target shift ‖v* − v‖ ≤ b, b = 415 the median shift at their last layer; ENCORE "
                "adds λ_n‖Δ‖² to MEMIT's objective and keeps the earlier edits' keys, Δ (λC + λ_n I + K_p "
                "K_pᵀ + K Kᵀ) = R Kᵀ with λ_n = 10 chosen on validation edits. Hollow markers are "
                "checkpoints measured on a sample of 50 edits; the last one measures all of them. A run that "
                "stopped early says where and is left out of the sentence's ranking.")
            runs_1000, parts_1000 = shipped_runs(str(SHIPPED_1000), SHIPPED_1000.stat().st_mtime)
            draw_parts(parts_1000, (K.LIFE_1000, K.LIFE_1000_LAYERS))
            unshipped_note(runs_1000, batch_only=True)


def own_run_section(s: Setup) -> None:
    """A short lifelong run of your own: the methods picked, one batch after another on CounterFact."""
    c1, c2, c3 = st.columns(3)
    chosen = c1.multiselect("Methods", list(LABELS), list(LABELS), format_func=LABELS.get, key=K.LIFE_METHODS)
    n = int(c2.number_input("Edits", 2, 200, 20, key=K.LIFE_N))
    batch = int(c3.number_input("Batch size (ROME: 1)", 1, 50, 5, key=K.LIFE_BATCH))
    if st.button("Run lifelong editing", key=K.LIFE_GO, disabled=not chosen):
        with ui.guard("lifelong editing"):
            ui.refuse(s.errors, chosen)
            records = load_eval_set("counterfact", n)

            plans = {}
            for m in chosen:
                b = batch if get(m).batch else 1
                spec = SequentialSpec(batch=b, eval_every=b * max(1, batch // b), sample=20, ppl_tokens=512,
                                      fluency_tokens=20)
                plans[m] = (s.overrides.get(m), spec)
            job = Item(sequential_methods, (plans, records), progress=True)
            memory = edit_ram(s.lm, chosen, batch, s.overrides) + scoring_ram(s.lm)
            st.session_state[K.LIFE] = ui.run_item("lifelong editing", s.lm, job, memory=memory, sequential=n)
    mine = st.session_state.get(K.LIFE)
    if mine:
        draw_runs(mine, (K.LIFE_FIG, K.LIFE_LAYERS),
                  "Per edited matrix: ‖ΔW‖/‖W‖ and the condition number of W + ΔW (σ_max/σ_min, the quantity "
                  "PRUNE bounds), after each checkpoint.")


def run_parts(runs: dict) -> tuple:
    """Lifelong runs (method -> LifelongRun) as what the page draws: the sentence that concludes them, the
    metric curves, the per-layer norm and condition number, the table (one column per method, so it fits the
    page)."""
    from editkit.evaluation.lifelong import Lifelong
    from editkit.figures.labels import readable

    life = Lifelong.of(runs, "counterfact")
    return (life.conclusion(), life.figure(), life.layer_figure(),
            pd.DataFrame(by_column(readable(life.table), "label")))


@st.cache_resource(show_spinner=False, max_entries=4)
def shipped_runs(path: str, mtime: float) -> tuple[dict, tuple]:
    """A shipped lifelong file's runs and drawn parts, built once per server process (per file version): its
    four figures took ~0.25 s of the server's one Python core (plotly, under the GIL) on every visit of this
    page. Shared between sessions and never changed (st.plotly_chart copies a figure before serializing
    it)."""
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
    st.table(table.set_index("measure"))  # wraps its headers: ten runs side by side fit, no sideways scroll


def draw_runs(runs: dict, keys: tuple[str, str], layer_caption: str = "") -> None:
    """Lifelong runs (method -> LifelongRun): see run_parts."""
    draw_parts(run_parts(runs), keys, layer_caption)




# ---- side effects: why neighbours move, and what another setting would do ----------------------------------
def bleed_section(s: Setup) -> None:
    """The bleed map of the first request: measured rise of P(new) on other subjects vs the update's share."""
    from editkit.evaluation.bleed import bleed_map

    st.subheader("Why did neighbours move? The bleed map")
    st.markdown(
        "An edit changes a matrix W by ΔW, so at every token whose input to W is k the layer's output "
        "changes by exactly ΔW k. ROME's update is rank one, so that change is the edited subject's own "
        "change scaled by a share s: a neighbour whose key looks like the edited subject's *to C⁻¹* (s near "
        "1) is pushed toward the new target just as hard. Each point is one prompt about another subject "
        "(CounterFact neighbours, known facts of the same relation): x = its largest share over its tokens, "
        "y = how much P(new) rose.")
    st.latex(r"\Delta W k = \Lambda\,(C^{-1}k_*)^\top k = s(k)\,(v_* - W k_*),\qquad "
             r"s(k) = \frac{(C^{-1}k_*)^\top k}{(C^{-1}k_*)^\top k_*}")
    st.caption("MEMIT, PMET and AlphaEdit: s = Σ_l ⟨ΔW_l k, ΔW_l k*⟩ / Σ_l ‖ΔW_l k*‖², with their own "
               "updates.")
    if not s.records:
        st.info("Choose a request above to map its bleed.")
        return
    c1, c2 = st.columns(2)
    method = c1.selectbox("Method", list(LABELS), format_func=LABELS.get, key=K.BLEED_METHOD)
    n_facts = c2.number_input("Known facts of the same relation", 0, 50, 15, key=K.BLEED_FACTS)
    if st.button("Map the bleed of the first request", key=K.BLEED_GO):
        with ui.guard("bleed map"):
            ui.refuse(s.errors, [method])

            job = Item(bleed_map, (method, s.records[0].request, s.overrides.get(method)),
                       {"relation": s.records[0].relation, "n_facts": int(n_facts)}, progress=True)
            st.session_state[K.BLEED] = ui.run_item("bleed map", s.lm, job, facts=int(n_facts),
                                                       memory=edit_ram(s.lm, [method], 1, s.overrides))
    out = st.session_state.get(K.BLEED)
    if not out:
        return
    st.plotly_chart(out.figure(), width="stretch", key=K.BLEED_FIG)
    c = out.check
    if c is None:
        st.caption(f"{out.method} declares no prediction of its effect on other keys: the chart shows the "
                   "measured rise only.")
    else:
        st.caption(f"Check: the predicted change ({out.formula}) matches the measured change of the edited "
                   f"layer's output at every token to {c['max_error']:.1e} of the largest change.")
    rows = [{"source": r.source, "prompt": r.prompt,
             "share s": None if r.share is None else round(r.share, 3), "at token": r.token,
             "P(new) before": round(r.p_new_before, 3), "P(new) after": round(r.p_new_after, 3)}
            for r in sorted(out.rows, key=lambda r: -abs(r.share or 0.0))]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")


def sweep_inputs():
    """The method, the records (a shipped set or the user's file; None until uploaded), their number and the
    grid."""
    from editkit.evaluation import EVAL_SETS
    from editkit.evaluation.datasets import save_upload

    c1, c2, c3 = st.columns(3)
    method = c1.selectbox("Method", list(LABELS), format_func=LABELS.get, key=K.SWEEP_METHOD)
    choices = list(EVAL_SETS) + ["my own file"]
    set_choice = c2.selectbox("Records", choices, index=choices.index("counterfact-val"), key=K.SWEEP_SET)
    n = int(c3.number_input("Records per setting", 1, 1000, 10, key=K.SWEEP_N))
    set_name = set_choice
    if set_choice == "my own file":
        up = st.file_uploader("A .json / .jsonl file of CounterFact, EasyEdit or zsRE records",
                              type=["json", "jsonl"], key=K.SWEEP_UPLOAD,
                              max_upload_size=ui.upload_mb("records"))
        set_name = None
        if up is not None:
            with ui.guard("your records"):
                ui.check_upload(up, "records")
                set_name = str(save_upload(up.name, up.getvalue()))
    params = st.text_area("Values to try, one hyperparameter per line: name=v1,v2,... (every combination "
                          "runs)",
                          "mom2_shrinkage=0,0.3,0.6", key=K.SWEEP_PARAMS)
    return method, set_name, n, _lines(params)


def sweep_section(s: Setup) -> None:
    """A hyperparameter sweep on an evaluation set, drawn as the trade-off it is (Pareto chart)."""
    from editkit.evaluation.sweep import SWEEP, sweep
    from editkit.evaluation.sweep import conclusion as sweep_conclusion

    st.subheader("Tune the trade-off: a hyperparameter sweep")
    st.markdown(
        "An edit must win on the rewrite and its paraphrases (efficacy, generalization) without flipping "
        "other subjects (specificity). Settings that push harder, e.g. less weight decay on δ or a larger "
        "norm clamp, help the first two and hurt the third; statistics C that separate keys better help all "
        "three. Each point is one setting evaluated on the same records; outlined points are Pareto-optimal: "
        "no other setting is at least as good on all three rates. Choose settings on a validation set, never "
        "on the set you report.")
    st.latex(r"\text{efficacy} = \mathbb{E}\,1[P(o^*) > P(o^c)]\ \text{(rewrite)},\quad "
             r"\text{specificity} = \mathbb{E}\,1[P(o^c) > P(o^*)]\ \text{(neighbours)}")
    method, set_name, n, params = sweep_inputs()
    st.caption("Each setting edits every record once (ROME one at a time, the others in batches of 10); "
               "settings that differ only in the statistics or λ reuse the optimized targets, and finished "
               "settings are cached, so a wider grid only computes what is new.")
    if st.button("Run the sweep", key=K.SWEEP_GO, disabled=set_name is None):
        with ui.guard("sweep"):
            ui.refuse(s.errors, [method])

            job = Item(sweep, (method, params, replace(SWEEP, set_name=set_name, n=n)),
                       {"hparams": s.overrides.get(method)}, progress=True)
            st.session_state[K.SWEEP] = ui.run_item("sweep", s.lm, job, facts=n,
                                                       memory=edit_ram(s.lm, [method], 1, s.overrides))
    out = st.session_state.get(K.SWEEP)
    if out:
        st.markdown(sweep_conclusion(out))
        st.plotly_chart(out.figure(("efficacy", "generalization", "gen_efficacy")), width="stretch",
                        key=K.SWEEP_FIG)
        st.dataframe(out.to_frame(), hide_index=True, width="stretch")
        st.download_button("Download the sweep (JSON)", json.dumps(out.to_json(), indent=1, default=str),
                           "sweep.json", "application/json", key=K.SWEEP_JSON)


def ripple_section(s: Setup) -> None:
    """What the first request should move beside what it must not: implied facts before and after each
    method."""
    from editkit.data.implications import relation_of, table
    from editkit.evaluation.ripple import ripple_view

    st.subheader("What should the edit move? Ripple effects")
    st.markdown(
        r"Move the Eiffel Tower to Rome and it should also be *in Italy*, answer to its other names, and "
        r"keep its architect; Paris should stay in France. From the edit (s, r, o → o\*) editkit derives "
        r"such facts from the model's **own** answers: a rule (r, r₂) composes (s, r, o\*) with (o\*, r₂, "
        r"z\*) into (s, r∘r₂, z\*), with z\* the model's top-1 for o\*, kept only if it knows it. Each cell "
        "is P(expected | prompt) after an edit, green where the fact moved (→) or stayed (=) as it should. "
        "The in-context reference changes no weight: it writes \"Imagine that <the new fact>.\" before "
        "every prompt.")
    if not s.records:
        st.info("Choose a request above to test its ripple effects.")
        return
    rels = table()["relations"]
    req = s.records[0].request
    guess = s.records[0].relation or req.relation or relation_of(req.prompt)
    options = [None] + list(rels)
    follow_guess(guess if guess in options else None)
    c1, c2 = st.columns([2, 1])
    relation = c1.selectbox("Relation of the edited fact (Wikidata)", options, key=K.RIPPLE_REL,
                            format_func=lambda r: ("none: derive nothing" if r is None
                                                   else f"{r}: {rels[r]['label']}"))
    reference = c2.checkbox("In-context reference", True, key=K.RIPPLE_REF)
    empty = pd.DataFrame({"prompt": [""], "expected answer": [""], "should": ["move"]}).iloc[:0]
    should = st.column_config.SelectboxColumn(options=["move", "stay"])
    mine = st.data_editor(empty, num_rows="dynamic", column_config={"should": should}, key=K.RIPPLE_MINE,
                          width="stretch")
    st.caption("Add implied facts of your own: a prompt, the answer it should have after the edit, and "
               "whether the edit should move it there or leave it there.")
    if st.button("Test the ripple effects of the first request", key=K.RIPPLE_GO, disabled=not s.methods):
        with ui.guard("ripple effects"):
            ui.refuse(s.errors, s.methods)
            extra = [{"prompt": str(r["prompt"] or ""), "answer": str(r["expected answer"] or ""),
                      "move": r["should"] != "stay"} for _, r in mine.iterrows()
                     if str(r["prompt"] or "").strip() or str(r["expected answer"] or "").strip()]
            job = Item(ripple_view, (req, s.methods, relation or "", s.overrides, extra, reference),
                       progress=True)
            st.session_state[K.RIPPLE] = ui.run_item("ripple effects", s.lm, job, batch=len(s.methods) + 1,
                                                     memory=edit_ram(s.lm, s.methods, 1, s.overrides))
    show_ripple(st.session_state.get(K.RIPPLE))


def show_ripple(out) -> None:
    """The ripple grid, its conclusion and criteria, what a propagation method wrote, the facts dropped."""
    from editkit.data.implications import CRITERIA

    if not out:
        return
    fig = out.figure()
    if fig is None:
        st.info(out.message)
    else:
        st.plotly_chart(fig, width="stretch", key=K.RIPPLE_FIG)
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


def follow_guess(guess: str | None) -> None:
    """The relation box set to the request's guessed relation whenever that guess changes (a keyed selectbox
    keeps its value when its default moves: the Taj Mahal 'located in' was tested as P103, the example's)."""
    if st.session_state.get(K.RIPPLE_GUESS) != guess or K.RIPPLE_REL not in st.session_state:
        st.session_state[K.RIPPLE_GUESS] = guess
        st.session_state[K.RIPPLE_REL] = guess


def show_written(out) -> None:
    """What a propagation method put in its batch besides the request (co-edit's implications, kept facts)."""
    from editkit.evaluation.ripple import WRITTEN

    rows = [{"method": m.label, "prompt": w["prompt"], "answer written": w["target"].strip(),
             "why": WRITTEN[w["why"]]} for m in out.methods for w in m.wrote]
    if not rows:
        return
    names = ", ".join(dict.fromkeys(r["method"] for r in rows))
    with st.expander(f"What {names} wrote besides the request ({len(rows)} fact(s))"):
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
        st.caption("A propagation method edits more than the request: the facts the new one implies, so that "
                   "they move with it, and the subject's other facts at the model's own answers, so that "
                   "they stay. It writes them in other words than the prompts tested above, so a pass above "
                   "is not a copy.")


def _rate(pair) -> str:
    return "-" if not pair else f"{100 * pair[1]:.0f}%"


if __name__ == "__main__":
    ui.script_run(__file__)
