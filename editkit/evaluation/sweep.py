"""Hyperparameter sweeps: the trade-off between making an edit work and keeping it local, per setting.

    sweep(lm, "rome", {"v_weight_decay": [1e-3, 0.1], "layers": [[3], [4]]}, replace(SWEEP, n=50))

edits the first n records of a set (a shipped set or a records file) with every combination of the given values
(the rest of the hyperparameters are the model's defaults) and reports, per setting, the CounterFact rates of
evaluate.py: efficacy and generalization (the new target wins on the rewrite / paraphrase prompts), specificity (the
true target still wins on neighbourhood prompts), the generation-based efficacy (QAEdit) and the magnitudes.
A setting is Pareto-optimal when no other setting is at least as good on efficacy, generalization and specificity
and better on one; the front is what a user chooses from.

Cost and resumption: every setting is one evaluation run (items.py), whose per-record results file resumes an
interrupted setting record by record; a finished setting's summary is a cache entry (editkit/core/cache.py,
keyed by the model's weights, the method, the set, n, batch and the complete hyperparameters), so a rerun or a
wider grid only computes new settings. Settings that differ only in how the update is solved (statistics,
shrinkage, lambda) share their target vectors (editing/memo.py), so such a setting costs a solve and the
measurements, not an optimisation. Every setting's batches of records are independent work items, run in order
in this process or spread over the workers of a Ray cluster (`backend`, editkit/runtime/cluster.py), with the
same numbers.
"""
from __future__ import annotations

import itertools
import json
import math
from dataclasses import asdict, dataclass, replace

from ..core.cache import Store
from ..core.errors import EditkitError
from ..core.results import JsonObject, Result, frame
from ..editing.defaults import load_hparams
from ..editing.methods import get
from ..figures.side_effects import pareto_figure, sweep_table
from ..model.weights import fingerprint
from ..runtime.cluster import Backend
from .datasets import load_eval_set, set_id
from .evaluate import check_spec, pre_path, results_dir, results_path, summarize
from .items import Run, execute
from .measure import FORMAT, EvalSpec

STORE = Store("sweeps", version=1)
# a sweep's defaults: choose settings on the validation set; no sampled generations (a sweep compares rates);
# batch None: 1 for methods that edit one request at a time (ROME), 10 for batch methods
SWEEP = EvalSpec(set_name="counterfact-val", n=50, batch=None, n_gen=0, gen_tokens=40)
RATES = ("efficacy", "generalization", "specificity")
METRICS = RATES + ("gen_efficacy", "gen_generalization", "efficacy_magnitude", "generalization_magnitude",
                   "specificity_magnitude", "reliability", "generalization_acc")


@dataclass
class Sweep(Result):
    """A method at every setting of a grid (module docstring). Each entry of `settings` is one setting's row (JSON:
    its overrides, label, complete hyperparameters, per metric {"mean", "ci95"} x100 after the edit, the unedited
    model's, whether it came from the cache and whether it is Pareto-optimal); `pareto` indexes the optimal ones,
    `fronts` the 2-D front of specificity against each metric."""

    model: str
    method: str
    set: str
    n: int
    batch: int
    params: dict
    settings: list[dict]
    pareto: list[int]
    unedited: dict | None
    fronts: dict[str, list[int]]
    computed_records: int
    reused_targets: dict | None
    defaults: dict
    overrides: dict

    def headline(self) -> str:
        return (f"{self.method}, {len(self.settings)} settings on {self.n} {self.set} records: Pareto-optimal "
                + "; ".join(self.settings[i]["label"] for i in self.pareto))

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def _from_json(cls, d: dict) -> "Sweep":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})

    def to_frame(self):
        """The unedited model, then each setting: its rates x100 and its Pareto mark (figures.sweep_table)."""
        return frame(sweep_table(self.to_json()))

    def figure(self, ys=("efficacy", "generalization")):
        """Each setting as a point (specificity across, `ys` up, 95% bars), each metric's 2-D front as a line."""
        return pareto_figure(self.to_json(), ys)


def split_values(text: str) -> list[str]:
    """'1,2,[3,4]' -> ['1', '2', '[3,4]']: commas inside brackets or quotes do not split."""
    parts, depth, cur, quote = [], 0, "", None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def parse_value(text: str):
    """A JSON value (1e-3, 4, true, [2,3]); anything else is taken as a string."""
    try:
        return json.loads(text)
    except ValueError:
        return text.strip("\"'")


def parse_param(spec: str) -> tuple[str, list]:
    """'name=v1,v2,...' -> (name, [v1, v2, ...]); for `layers` a single number n means [n] (one layer)."""
    name, sep, values = str(spec).partition("=")
    name = name.strip()
    if not sep or not name or not values.strip():
        raise EditkitError(f"a sweep parameter looks like name=v1,v2,... (got {spec!r})")
    parsed = [parse_value(v) for v in split_values(values)]
    if any(v == "" for v in parsed):
        raise EditkitError(f"empty value in {spec!r}")
    if name == "layers":
        parsed = [[v] if isinstance(v, int) and not isinstance(v, bool) else v for v in parsed]
    return name, parsed


def parse_params(specs) -> dict[str, list]:
    """A dict {name: values} from a dict, or from a list of 'name=v1,v2' strings (a name given twice is an error)."""
    if isinstance(specs, dict):
        return {k: list(v) if isinstance(v, (list, tuple)) else [v] for k, v in specs.items()}
    out: dict[str, list] = {}
    for spec in specs or []:
        name, values = parse_param(spec)
        if name in out:
            raise EditkitError(f"parameter {name!r} is given twice")
        out[name] = values
    return out


def grid(params: dict[str, list]) -> list[dict]:
    """Every combination of the values (the first parameter varies slowest); [{}] for no parameters."""
    names = list(params)
    return [dict(zip(names, combo)) for combo in itertools.product(*(params[n] for n in names))]


def label(setting: dict) -> str:
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in setting.items()) or "defaults"


def dominates(a: dict, b: dict, keys=RATES) -> bool:
    """a is at least as good as b on every key and better on one (higher is better)."""
    va, vb = [a[k]["mean"] for k in keys], [b[k]["mean"] for k in keys]
    if any(x is None for x in va + vb):
        return False
    return all(x >= y for x, y in zip(va, vb)) and any(x > y for x, y in zip(va, vb))


def pareto(rows: list[dict], keys=RATES) -> list[int]:
    """Indices of the settings no other setting dominates on `keys`."""
    return [i for i, r in enumerate(rows) if not any(dominates(o, r, keys) for j, o in enumerate(rows) if j != i)]


def _cell(t: dict, key: str) -> dict:
    c = t.get(key) or {}
    return {"mean": c.get("mean"), "ci95": c.get("ci95")}


def summary_row(setting: dict, hp, table: dict) -> dict:
    """One setting's line: its overrides, the full hyperparameters and the post-edit metrics (x100)."""
    row = {"setting": setting, "label": label(setting), "hparams": hp.to_dict(), "records": table["records"],
           "seconds_per_request": table.get("seconds_per_request"), "score": table.get("post_table_score"),
           "results_file": table.get("results_file")}
    for k in METRICS + ("locality",):
        row[k] = _cell(table, k if k == "locality" else f"post_{k}")
    row["unedited"] = {k: _cell(table, f"pre_{k}") for k in METRICS}
    row["unedited"]["score"] = table.get("pre_table_score")
    return row


def sweep(lm, method: str, params, spec: EvalSpec = SWEEP, hparams: dict | None = None, out_dir=None,
          reuse: bool = True, progress=None, backend: Backend | None = None) -> Sweep:
    """Evaluate `method` at every setting of the grid `params` ({name: values} or ['name=v1,v2', ...]) on the
    records `spec` names (SWEEP: the defaults).

    Every setting starts from the model's defaults with `hparams` (the user's overrides) applied, and the grid's
    values on top of those. `reuse` shares target vectors between settings (editing/memo.py). `backend`: where the
    work items run (one per setting and batch of records, items.py; in this process by default, or on Ray
    workers), with the same results."""
    m = get(method)
    params = parse_params(params)
    n = spec.n
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise EditkitError("--n must be a whole number of at least 1")
    spec = replace(spec, batch=spec.batch or (10 if m.batch else 1))
    check_spec(spec)
    settings = grid(params)
    base = dict(hparams or {})
    hps = [load_hparams(m.name, lm, {**base, **s}) for s in settings]  # all valid before anything runs
    records = load_eval_set(spec.set_name, n)  # an unknown set or a bad file fails now
    set_key = set_id(spec.set_name)
    gen = {"n_gen": spec.n_gen, "gen_tokens": spec.gen_tokens, "greedy_tokens": spec.greedy_tokens}
    weights = fingerprint(lm)
    out = results_dir(lm, out_dir)
    rows: list = [None] * len(settings)
    runs, where = [], []  # the settings still to compute, as evaluation runs, and their places in the grid
    for i, (setting, hp) in enumerate(zip(settings, hps)):
        path = STORE.path(lm.name, method=m.name, set=set_key, n=n, batch=spec.batch, hparams=hp.to_dict(),
                          weights=weights, format=FORMAT, **gen)
        hit = STORE.get(path)
        if hit is not None:
            rows[i] = {**hit, "setting": setting, "label": label(setting), "cached": True}
            continue
        runs.append(Run(m.name, hp, results_path(lm, m.name, hp, spec, set_key, out),
                        f"setting {i + 1}/{len(settings)} ({label(setting)})"))
        where.append((i, path))

    def finished(r: int, setting_rows: list[dict]) -> None:  # a setting is complete: cache its summary now
        i, path = where[r]
        table = {**summarize(setting_rows), "results_file": str(runs[r].path)}
        row = summary_row(settings[i], hps[i], table)
        STORE.put(path, row)
        rows[i] = {**row, "cached": False}

    outcome = execute(lm, runs, records, spec, pre_path(lm, spec, set_key, out), backend, progress, reuse, finished)
    front = pareto(rows)
    for i, r in enumerate(rows):
        r["pareto"] = i in front
    if progress:
        progress(1.0, "sweep done")
    return Sweep(lm.name, m.name, spec.set_name, n, spec.batch, params, rows, front,
                 rows[0]["unedited"] if rows else None, {y: front_2d(rows, "specificity", y) for y in METRICS},
                 outcome.computed, outcome.reused, load_hparams(m.name, lm).to_dict(), base)


def front_2d(rows: list[dict], x: str = "specificity", y: str = "efficacy") -> list[int]:
    """Indices of the settings on the 2-D Pareto front of (x, y), sorted by x: what a chart's line connects."""
    idx = pareto(rows, (x, y))
    return sorted(idx, key=lambda i: rows[i][x]["mean"] if rows[i][x]["mean"] is not None else -math.inf)


def conclusion(sweep: Sweep) -> str:
    """A hyperparameter sweep in one sentence: the Pareto-optimal settings (no other at least as good on all three
    rates) and the best by the score, the harmonic mean of the rates. The score carries no interval here, so the
    settings are ranked as measured; the rates' 95% intervals are in the table."""
    rows = [r for r in sweep.settings if r.get("score") is not None]
    front = [r["label"] for r in sweep.settings if r.get("pareto")]
    if not rows:
        return f"Pareto-optimal: {', '.join(front) or 'none'}."
    rows.sort(key=lambda r: -r["score"])
    rest = ", ".join(f"{r['label']} ({r['score']:.1f})" for r in rows[1:4])
    return (f"By the score (harmonic mean of efficacy, generalization and specificity), {rows[0]['label']} is best "
            f"({rows[0]['score']:.1f})" + (f"; then {rest}" if rest else "") + ". Pareto-optimal: "
            + (", ".join(front) or "none") + ".")
