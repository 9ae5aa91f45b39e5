"""Ripple effects over many edits: `python -m editkit evaluate --ripple`.

The edits: CounterFact records (the ROME-schema 500, then EasyEdit's 10,000 with the relation read from the
template) whose relation has a ripple rule, whose subject is not in counterfact-val (settings are chosen there:
`set_name="counterfact-val"` evaluates those instead), that the model knows (its greedy answer to the rewrite
prompt is target_true) and with at least one logical-generalization fact the model knows. Candidates are screened
in file order until `n` are found; every screened candidate is kept in a selection file (its derivation, or why
it was left out), so a rerun resumes. Each method then edits every selected record alone (RippleEdits edits one
fact at a time) and its results go one line per record to its own file, resumable too; the work items run in
this process or on Ray workers (runtime/cluster.py).

Per method and criterion: the mean over edits of the share of implied facts that moved / stayed as they should,
with a 95% interval over edits and the paired difference to MEMIT (same edits, same facts).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import EditkitError
from ..core.paths import cache_dir, safe_name
from ..core.progress import part
from ..core.results import JsonObject, Result, frame
from ..data.implications import ImpliedFact, derive_many, kept, rules_for, table
from ..editing.defaults import load_hparams
from ..runtime.cluster import Backend, Item, run_items
from .datasets import EvalRecord, load_eval_set
from .items import append_row, read_rows
from .ripple import IN_CONTEXT, counterfact_rates, method_ripple, share_table

FORMAT = 1  # bump when the derivation or the measurement changes, so old files are not resumed
SCREEN_CHUNK = 24


@dataclass(frozen=True)
class RippleSpec:
    set_name: str = "counterfact"  # "counterfact" (the pool above) or "counterfact-val" (for choosing settings)
    n: int = 100
    max_per_criterion: int = 4
    against: str = "memit"  # the paired differences are to this method


@dataclass
class RippleEvaluation(Result):
    """Per method and criterion over `n` edits of `set`: {"mean", "ci95", "edits", "diff"?} (x100; `diff` the
    paired difference to `against`), the number of implied facts per criterion, and each method's results file."""

    model: str
    set: str
    n: int
    facts: dict[str, int]
    against: str
    table: dict[str, dict]
    files: dict[str, str]

    def headline(self) -> str:
        return f"ripple effects on {self.model}, {self.n} edits of {self.set}, methods: {', '.join(self.table)}"

    def to_json(self) -> JsonObject:
        return {"model": self.model, "set": self.set, "n": self.n, "facts": self.facts, "against": self.against,
                "table": self.table, "files": self.files}

    @classmethod
    def _from_json(cls, d: dict) -> "RippleEvaluation":
        return cls(d["model"], d["set"], d["n"], d["facts"], d["against"], d["table"], d.get("files", {}))

    def figure(self):
        """Bars per criterion and method with 95% intervals over edits (figures/ripple.share_figure)."""
        from ..figures.ripple import share_figure

        return share_figure(self.to_json())

    def to_frame(self):
        """Long form: one row per method and measure with its mean, 95% half-width, edits and paired difference."""
        rows = [{"method": m, "measure": c, "mean": cell["mean"], "ci95": cell["ci95"], "edits": cell["edits"],
                 "diff": (cell.get("diff") or {}).get("mean"), "diff_ci95": (cell.get("diff") or {}).get("ci95")}
                for m, cells in self.table.items() for c, cell in cells.items()]
        return frame(rows, ["method", "measure", "mean", "ci95", "edits", "diff", "diff_ci95"])


def _hash(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _key(rec: EvalRecord) -> str:
    return rec.source


def pool(set_name: str) -> list[EvalRecord]:
    """The candidate records, in order, each with its relation."""
    if set_name == "counterfact-val":
        records = load_eval_set("counterfact-val")
    elif set_name == "counterfact":
        held = {r.request.subject for r in load_eval_set("counterfact-val")}
        records = [r for r in load_eval_set("counterfact") + load_eval_set("counterfact-edit")
                   if r.request.subject not in held]
    else:
        raise EditkitError(f"ripple evaluation sets: counterfact, counterfact-val (not {set_name!r})")
    out = []
    for r in records:
        relation = r.relation or r.request.relation
        if relation is None:
            from ..data.implications import relation_of
            relation = relation_of(r.request.prompt)
        if relation and rules_for(relation) and r.request.target_true:
            r.request.relation = relation
            r.relation = relation
            out.append(r)
    return out


def results_dir(lm, out_dir=None) -> Path:
    out = Path(out_dir) if out_dir else cache_dir("evaluations", safe_name(lm.name))
    out.mkdir(parents=True, exist_ok=True)
    return out


def _deciding() -> dict:
    """The parts of the rule table a selection depends on (synonym groups only filter specificity facts, which no
    selection reads: they are applied when the facts are counted)."""
    return {k: v for k, v in table().items() if not k.startswith("synonyms")}


def select(lm, spec: RippleSpec, out_dir: Path, progress=None) -> list[tuple[EvalRecord, dict]]:
    """The first spec.n usable records of the pool with their derivations, screening (and recording) more as
    needed."""
    path = out_dir / f"ripple-select-{safe_name(lm.name)}-{spec.set_name}-" \
                     f"{_hash({'format': FORMAT, 'cap': spec.max_per_criterion, 'rules': _deciding()})}.jsonl"
    done = read_rows(path)
    records = pool(spec.set_name)
    chosen = []
    i = 0
    while len(chosen) < spec.n and i < len(records):
        chunk = records[i:i + SCREEN_CHUNK]
        todo = [r for r in chunk if _key(r) not in done]
        if todo:
            if progress:
                progress(min(len(chosen) / spec.n, 1.0), f"screening records {i + 1}-{i + len(chunk)} "
                                                         f"({len(chosen)} of {spec.n} chosen)")
            for rec, row in zip(todo, _screen(lm, todo)):
                done[_key(rec)] = row
                append_row(path, row)
        for rec in chunk:
            row = done[_key(rec)]
            if row["use"] and len(chosen) < spec.n:
                chosen.append((rec, row))
        i += len(chunk)
    if len(chosen) < spec.n:
        raise EditkitError(f"only {len(chosen)} records of {spec.set_name} are usable (known, with a logical fact "
                           f"the model knows); ask for at most that many")
    return chosen


def _screen(lm, records: list[EvalRecord]) -> list[dict]:
    """Whether each record is usable, and its derivation: the known-fact check first (one teacher-forced pass),
    the derivation (greedy clozes) only for the records the model knows."""
    knows = _knows(lm, [r.request for r in records])
    known = [r for r, k in zip(records, knows) if k]
    derived = dict(zip((_key(r) for r in known), derive_many(lm, [r.request for r in known],
                                                             [r.relation for r in known])))
    rows = []
    for rec in records:
        d = derived.get(_key(rec))
        use = d is not None and any(f.criterion == "logical" for f in d.facts)
        reason = "" if use else ("the model does not know the fact" if d is None else "no logical fact it knows")
        rows.append({"key": _key(rec), "use": use, "reason": reason, "derivation": d.to_dict() if d else None,
                     "pre": list(counterfact_rates(lm, rec.request)) if use else None})
    return rows


def _knows(lm, requests: list) -> list[bool]:
    """Whether the model's greedy answer to each rewrite prompt is its target_true (every token the argmax)."""
    from ..model.scoring import score_targets

    scores = score_targets(lm, [r.rewrite for r in requests], [r.target_true for r in requests])
    return [all(sc.token_hits) for sc in scores]


def ripple_batch(lm, method: str, requests: list, facts: list[list[dict]], pre: list, hp) -> list[dict]:
    """One work item: each request edited alone with `method`, its implied facts measured after the edit."""
    rows = []
    for r, fs, p in zip(requests, facts, pre):
        m = method_ripple(lm, method, r, [ImpliedFact(**f) for f in fs], hp, tuple(p))
        rows.append({"outcomes": [o.to_dict() for o in m.outcomes], "efficacy": m.efficacy,
                     "specificity": m.specificity, "seconds": m.seconds})
    return rows


def evaluate_ripple(lm, methods: list[str], spec: RippleSpec = RippleSpec(), hparams: dict | None = None,
                    out_dir=None, backend: Backend | None = None, progress=None,
                    batch: int = 5) -> RippleEvaluation:
    """Every method (and IN_CONTEXT) on the selected edits; the share table (ripple.share_table)."""
    if spec.n < 1:
        raise EditkitError("the number of edits must be at least 1")
    methods = [m.strip().lower() for m in methods if m.strip()]
    if not methods:
        raise EditkitError("give at least one method")
    hps = {m: None if m == IN_CONTEXT else load_hparams(m, lm, (hparams or {}).get(m)) for m in methods}
    out_dir = results_dir(lm, out_dir)
    chosen = select(lm, spec, out_dir, part(progress, 0.0, 0.2) if progress else None)
    facts = {_key(rec): row["derivation"]["facts"] for rec, row in chosen}
    paths = {m: out_dir / f"ripple-{safe_name(m)}-{safe_name(lm.name)}-{spec.set_name}-"
                          f"{_hash({'format': FORMAT, 'hp': hps[m].to_dict() if hps[m] else None, 'n_cap': spec.max_per_criterion})}.jsonl"
             for m in methods}
    done = {m: read_rows(paths[m]) for m in methods}
    items, where = [], []
    for m in methods:
        todo = [(rec, row) for rec, row in chosen if _key(rec) not in done[m]]
        for i in range(0, len(todo), batch):
            part_ = todo[i:i + batch]
            items.append(Item(ripple_batch, (m, [rec.request for rec, _ in part_], [facts[_key(rec)] for rec, _ in part_],
                                             [row["pre"] for _, row in part_], hps[m]),
                              label=f"{m}: {len(part_)} edit(s)"))
            where.append((m, [_key(rec) for rec, _ in part_]))

    def written(j: int, rows: list[dict]) -> None:
        m, keys = where[j]
        for key, row in zip(keys, rows):
            row = {"key": key, **row}
            append_row(paths[m], row)
            done[m][key] = row

    run_items(lm, items, backend or Backend(), part(progress, 0.2, 1.0) if progress else None, done=written)
    masks = {_key(rec): [kept(f, row["derivation"]["relation"]) for f in row["derivation"]["facts"]]
             for rec, row in chosen}
    facts = {k: [f for f, ok in zip(fs, masks[k]) if ok] for k, fs in facts.items()}
    rows = {m: [{**done[m][_key(rec)], "outcomes": [o for o, ok in zip(done[m][_key(rec)]["outcomes"],
                                                                        masks[_key(rec)]) if ok]}
                for rec, _ in chosen] for m in methods}
    n_facts = {c: sum(1 for fs in facts.values() for f in fs if f["criterion"] == c) for c in
               ("logical", "aliasing", "specificity", "preservation")}
    return RippleEvaluation(lm.name, spec.set_name, len(chosen), n_facts, spec.against,
                            share_table(rows, facts, spec.against), {m: str(p) for m, p in paths.items()})
