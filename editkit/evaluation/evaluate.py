"""Evaluate methods over a shipped set: the same measurements before and after (measure.py), for every method,
and a PMET-Table-1-style summary.

`evaluate(lm, methods, EvalSpec(...))` runs methods over a shipped set in batches, appending one JSON line per record
to a results file so an interrupted run resumes where it stopped; its batches are independent work items
(items.py), run in this process or on a Ray cluster (`backend`, editkit/runtime/cluster.py).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.errors import EditkitError
from ..core.paths import cache_dir, safe_name
from ..core.results import JsonObject, Result, frame
from ..editing.defaults import load_hparams
from ..figures.editing import evaluation_figure
from ..figures.labels import header
from ..model.weights import active_digest
from ..runtime.cluster import Backend
from .datasets import load_eval_set, set_id
from .items import Run, execute
from .measure import FORMAT, GEN_SEED, EvalSpec
from .metrics import harmonic_mean, mean_ci

# the table's columns: Score = the harmonic mean of the mean rates (PMET Table 1), then each metric's mean
COLUMNS = ("score", "efficacy", "generalization", "specificity", "fluency", "consistency", "gen_efficacy",
           "gen_generalization", "reliability", "generalization_acc", "locality")


@dataclass
class Evaluation(Result):
    """A batch evaluation (what `evaluate --json` prints): the set, its size and batch, the generation setting, and
    per method its summary (`summarize`: per metric {"mean", "ci95"} x100 before (pre_) and after (post_) the edit,
    the paired changes, the table Score, seconds per request, its results file)."""

    model: str
    set: str
    n: int
    batch: int
    generation: dict
    computed_records: int
    metric_family: str
    notes: str
    methods: dict[str, dict]

    _show = "table"

    def headline(self) -> str:
        scores = ", ".join(f"{m} {t.get('post_table_score') or float('nan'):.1f}" for m, t in self.methods.items())
        return f"{self.model} on {self.set} ({self.n} records, batch {self.batch}); Score: {scores}"

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def _from_json(cls, d: dict) -> "Evaluation":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})

    def cell(self, method: str, when: str, column: str) -> dict | None:
        """One table cell {"mean", "ci95"}: the Score of the mean rates, locality after the edit only (it compares
        the edited model's tokens with the unedited one's), else the metric's mean at `when` ("pre", "post")."""
        t = self.methods[method]
        if column == "score":
            return {"mean": t.get(when + "_table_score"), "ci95": None}
        if column == "locality":
            return t.get("locality") if when == "post" else None
        return t.get(when + "_" + column)

    def to_frame(self):
        """The table the CLI prints: the records before any edit, then one row per method, each metric's mean x100
        (headers name the metric's family) and seconds per request."""
        rows = []
        for i, method in enumerate(self.methods):
            for when in (("pre", "post") if i == 0 else ("post",)):
                row = {"method": "(pre-edit)" if when == "pre" else method}
                for c in COLUMNS:
                    cell = self.cell(method, when, c)
                    row[header(c, kind=self.metric_family)] = None if not cell else cell.get("mean")
                row["s/request"] = self.methods[method].get("seconds_per_request") if when == "post" else None
                rows.append(row)
        return frame(rows)

    def figure(self):
        """Each method's efficacy, generalization and specificity after the edit with 95% bars, the unedited
        model's as a reference."""
        return evaluation_figure(self.to_json())


def _hash(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def evaluate(lm, methods: list[str], spec: EvalSpec = EvalSpec(), hparams: dict | None = None,
             out_dir: str | Path | None = None, reuse_targets: bool = False, progress=None,
             backend: Backend | None = None) -> Evaluation:
    """Edit and measure the records `spec` names with each method, `spec.batch` requests per edit.

    `hparams` = {method: overrides}. Results go to `out_dir` (default: the editkit cache), one JSONL file per
    (model, method, batch, set, hparams, generation setting, active edits); a rerun skips the records already
    there. Pre-edit measurements are kept per (model, set, generation setting, active edits). `reuse_targets`
    shares optimized target vectors with earlier runs whose settings differ only in the solve (editing/memo.py).
    `backend`: where the work items run (items.py: one per method and batch of records; cluster.py: in this process
    by default, or on Ray workers), with the same results."""
    if isinstance(methods, str):
        methods = [m.strip() for m in methods.split(",") if m.strip()]
    methods = [m.lower() for m in methods]
    if not methods:
        raise EditkitError("give at least one method")
    check_spec(spec)
    hps = {m: load_hparams(m, lm, (hparams or {}).get(m)) for m in methods}  # fail early on bad methods/hparams
    records = load_eval_set(spec.set_name, spec.n)
    set_key = set_id(spec.set_name)
    out_dir = results_dir(lm, out_dir)
    runs = [Run(m, hps[m], results_path(lm, m, hps[m], spec, set_key, out_dir)) for m in methods]
    outcome = execute(lm, runs, records, spec, pre_path(lm, spec, set_key, out_dir), backend, progress,
                      reuse_targets)
    tables = {}
    for run, rows in zip(runs, outcome.rows):
        tables[run.method] = summarize(rows)
        tables[run.method]["results_file"] = str(run.path)
    if progress:
        progress(1.0, "evaluation done")
    kind = records[0].kind
    shown = spec.set_name if set_key == spec.set_name else f"{spec.set_name} ({set_key})"
    return Evaluation(lm.name, shown, len(records), spec.batch, generation(spec), outcome.computed, kind, NOTES[kind],
                      tables)


def check_spec(spec: EvalSpec) -> None:
    """A clear error for an EvalSpec no evaluation can run (batch set, counts not negative)."""
    if not isinstance(spec.batch, int) or spec.batch < 1:
        raise EditkitError("the batch size must be at least 1")
    if spec.n_gen < 0 or spec.gen_tokens < 0 or spec.greedy_tokens < 0:
        raise EditkitError("the number of generation prompts and tokens cannot be negative")


def generation(spec: EvalSpec) -> dict:
    """The generation setting of an evaluation, as its results files are keyed and its output reports it."""
    return {"n_gen": spec.n_gen, "gen_tokens": spec.gen_tokens, "seed": GEN_SEED, "sampling": "top-k 5",
            "greedy_tokens": spec.greedy_tokens}


def _edits() -> dict:
    """The edits active in this context (a session's kept edits), as part of a results file's key: results of the
    edited model never resume from the base model's file. Nothing for the base model (its file names stay)."""
    active = active_digest()
    return {"edits": active} if active else {}


def results_dir(lm, out_dir=None) -> Path:
    out = Path(out_dir) if out_dir else cache_dir("evaluations", safe_name(lm.name))
    out.mkdir(parents=True, exist_ok=True)
    return out


def results_path(lm, method: str, hp, spec: EvalSpec, set_key: str, out_dir: Path) -> Path:
    """The results file of one method at its complete hyperparameters `hp` (one JSON line per record)."""
    run_key = {"model": lm.name, "method": method, "batch": spec.batch, "set": set_key, "hparams": hp.to_dict(),
               "format": FORMAT, **generation(spec), **_edits()}
    return out_dir / f"{method}-{safe_name(lm.name)}-{safe_name(set_key)}-b{spec.batch}-{_hash(run_key)}.jsonl"


def pre_path(lm, spec: EvalSpec, set_key: str, out_dir: Path) -> Path:
    """The file of pre-edit measurements, shared by every method and setting with this generation setting."""
    key = {**generation(spec), "format": FORMAT, **_edits()}
    return out_dir / f"pre-{safe_name(lm.name)}-{safe_name(set_key)}-{_hash(key)}.jsonl"


NOTES = {
    "counterfact": "rates and magnitudes x100 as in ROME/MEMIT/PMET; gen_efficacy/gen_generalization = greedy "
                   "continuation of the rewrite/paraphrase prompts says target_new and no longer target_true "
                   "(QAEdit, arXiv 2502.11177); efficacy/generalization/specificity = "
                   "P(new) > P(true) on rewrite/paraphrase, P(true) > P(new) on neighborhood prompts, from mean "
                   "per-token NLLs; Score = harmonic mean of the three mean rates; fluency = weighted bi-/tri-gram "
                   "entropy x100 of the generations (setting in 'generation'); consistency = TF-IDF cosine x100 of "
                   "the generations and the record's attribute prompts completed with target_new (idf from "
                   "WikiText-2), not ROME's Wikipedia snippets, so not comparable with published values; None = "
                   "unavailable for this set; portability: no shipped set has portability prompts",
    "zsre": "rates x100: efficacy/generalization = top-1 token accuracy of the new answer after the question / "
            "its rephrase, specificity = token accuracy of the NQ answer on the unrelated question (ROME/MEMIT "
            "zsRE); no generation prompts, so no fluency or consistency",
}

TABLE = [("score", "Score"), ("efficacy", "Efficacy"), ("generalization", "Generalization"),
         ("specificity", "Specificity"), ("fluency", "Fluency"), ("consistency", "Consistency")]


RATES = ("efficacy", "generalization", "specificity")


def summarize(rows: list[dict]) -> dict:
    """Mean and 95% half-width of each metric over records, pre and post (x100, as in the papers' tables), each
    rate's paired change post - pre (change_<rate>: e.g. the specificity an edit costs, with its interval), the
    table Score (harmonic mean of the mean rates, PMET Table 1) and the mean edit seconds per request."""
    out = {"records": len(rows), "seconds_per_request": mean_ci([r["seconds"] for r in rows])[0] if rows else None}
    keys = sorted({k for r in rows for k in r["metrics"]})
    for k in keys:
        m, ci = mean_ci([r["metrics"][k] for r in rows if r["metrics"].get(k) is not None])
        out[k] = {"mean": None if math.isnan(m) else 100.0 * m, "ci95": None if math.isnan(ci) else 100.0 * ci}
    for k in RATES:  # the edit's effect per record, post - pre: a paired interval, narrower than two separate ones
        pairs = [r["metrics"][f"post_{k}"] - r["metrics"][f"pre_{k}"] for r in rows
                 if r["metrics"].get(f"post_{k}") is not None and r["metrics"].get(f"pre_{k}") is not None]
        if pairs:
            m, ci = mean_ci(pairs)
            out[f"change_{k}"] = {"mean": 100.0 * m, "ci95": None if math.isnan(ci) else 100.0 * ci}
    for when in ("pre", "post"):
        parts = [out.get(f"{when}_{k}", {}).get("mean") for k in RATES]
        out[f"{when}_table_score"] = harmonic_mean(parts) if all(p is not None for p in parts) else None
    return out
