"""Ripple effects over many edits: `python -m editkit evaluate --ripple`.

The edits: CounterFact records (the ROME-schema 500, then EasyEdit's 10,000 with the relation read from the
template) whose relation has a ripple rule, whose subject is not in counterfact-val (settings are chosen there:
`set_name="counterfact-val"` evaluates those instead), that the model knows (its greedy answer to the rewrite
prompt is target_true) and with at least one logical-generalization fact the model knows. Candidates are screened
in file order until `n` are found; every screened candidate is kept in a selection file (its derivation, or why
it was left out), so a rerun resumes. Each method then edits every selected record alone (RippleEdits edits one
fact at a time) and its results go one line per record to its own file, resumable too; the work items run in
this process or on Ray workers (runtime/cluster.py), edit by edit with the methods interleaved (the first edit
with every method, then the second...), so an interrupted run leaves paired rows.

Checkpoint: in a checkout the files go to the repository's `assets/results/ripple/<model>/` (`checkpoint_dir`),
which a lost cache does not lose and a commit carries to another machine; an installed package uses the cache.
Each file's name carries a hash of its settings and its first line is a header with the settings themselves; a
file whose header differs is refused, never mixed. In process every edit's row is appended as it finishes. Each
row carries a hash of the facts it measured (`facts`): when the rule table changes, the selection is screened
again and only the records whose facts changed are edited again (a rule's rephrasing does not redo the rest).
`evaluate_ripple(..., run=False)` tabulates the rows already there and edits nothing (a partial table).

Per method and criterion: the mean over edits of the share of implied facts that moved / stayed as they should,
with a 95% interval over edits and the paired difference to MEMIT (same edits, same facts).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..core.errors import EditkitError
from ..core.paths import ASSETS, ROOT, cache_dir, safe_name
from ..core.progress import part
from ..core.results import JsonObject, Result, frame
from ..data.implications import ImpliedFact, derive_many, kept, rules_for, table
from ..editing.defaults import load_hparams
from ..runtime.cluster import Backend, Item, run_items
from .datasets import EvalRecord, load_eval_set
from .items import append_row, read_rows
from .ripple import IN_CONTEXT, counterfact_rates, method_ripple, share_table

FORMAT = 1  # bump when the measurement changes, so no old row is resumed
DERIVATION = 2  # bump when the derivation changes: the selections are screened anew and only the rows whose
# record's facts changed are measured again (2: a relation's answers include those of its kind's relations).
# A row's stamp is the facts it measured, not what a method derived for itself (co-edit's kept relations): such
# a method's rows need a new file (a setting) or a check that its own derivations did not change.
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
    done: dict[str, int] = field(default_factory=dict)  # edits with a row, per method (< n: a partial table)

    @property
    def partial(self) -> bool:
        return any(v < self.n for v in self.done.values())

    def headline(self) -> str:
        done = ", ".join(f"{m} {k}" for m, k in self.done.items())
        part_ = f" (partial: {done} edits)" if self.partial else ""
        return (f"ripple effects on {self.model}, {self.n} edits of {self.set}{part_}, "
                f"methods: {', '.join(self.table)}")

    def to_json(self) -> JsonObject:
        return {"model": self.model, "set": self.set, "n": self.n, "facts": self.facts, "against": self.against,
                "table": self.table, "files": self.files, "done": self.done}

    @classmethod
    def _from_json(cls, d: dict) -> "RippleEvaluation":
        return cls(d["model"], d["set"], d["n"], d["facts"], d["against"], d["table"], d.get("files", {}),
                   d.get("done", {}))

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


def facts_stamp(facts: list[dict]) -> str:
    """What a row's outcomes stand for: each fact's identity (criterion, prompt, answer, rule, phrasings), not the
    probabilities measured before the edit, which a screening in other batches reproduces only to float rounding."""
    return _hash([[f.get(k) for k in ("criterion", "prompt", "answer", "move", "rule", "evidence", "edit_prompt",
                                      "subject")] for f in facts])


def _key(rec: EvalRecord) -> str:
    return rec.source


def pool(set_name: str) -> list[EvalRecord]:
    """The candidate records, in order, each with its relation (read once per process: the shipped sets do not
    change while it runs, and a results check tabulates dozens of tables from the same pool)."""
    return list(_pool(set_name))


@lru_cache(maxsize=4)
def _pool(set_name: str) -> tuple[EvalRecord, ...]:
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
    return tuple(out)


def checkpoint_dir(lm) -> Path:
    """Where the selection and results files go by default: in a checkout the repository's
    assets/results/ripple/<model>/ (they survive a lost cache and travel with a commit), else the cache."""
    if (ROOT / ".git").exists() and ASSETS == ROOT / "assets":
        return ASSETS / "results" / "ripple" / safe_name(lm.name)
    return cache_dir("evaluations", safe_name(lm.name))


def results_dir(lm, out_dir=None) -> Path:
    out = Path(out_dir) if out_dir else checkpoint_dir(lm)
    out.mkdir(parents=True, exist_ok=True)
    return out


def behaviour(settings: dict) -> dict:
    """Settings less the hyperparameters' `source` note (headers written before recorded() left it out carry it)."""
    hp = settings.get("hp")
    return {**settings, "hp": {k: v for k, v in hp.items() if k != "source"}} if isinstance(hp, dict) else settings


def header_row(path: Path, settings: dict) -> None:
    """A new file starts with {"header": settings}; an existing one must carry the same settings, its `source`
    note aside (a file from before headers, named by the same settings hash, is accepted). read_rows skips the
    header (no key)."""
    settings = json.loads(json.dumps(settings, default=str))
    if path.exists() and path.stat().st_size:
        with path.open(encoding="utf-8") as f:
            try:
                first = json.loads(f.readline())
            except ValueError:
                first = {}
        if isinstance(first, dict) and "header" in first and behaviour(first["header"]) != behaviour(settings):
            raise EditkitError(f"{path} was written with other settings ({first['header']}); not mixing rows "
                               f"of {settings} into it")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    append_row(path, {"header": settings})


def _deciding() -> dict:
    """The parts of the rule table a selection depends on (synonym groups only filter specificity facts, which no
    selection reads: they are applied when the facts are counted; a rule's more_edit_prompts and a relation's
    keep phrasing are phrasings only a propagation method writes)."""
    out = {k: v for k, v in table().items() if not k.startswith("synonyms")}
    out["rules"] = [{k: v for k, v in r.items() if k != "more_edit_prompts"} for r in out["rules"]]
    out["relations"] = {r: {k: v for k, v in d.items() if k != "keep"} for r, d in out["relations"].items()}
    return out


def selection_path(model: str, spec: RippleSpec, out_dir: Path) -> Path:
    """The selection file of `model` (its name) under today's rule table and derivation."""
    settings = {'format': FORMAT, 'derivation': DERIVATION, 'cap': spec.max_per_criterion, 'rules': _deciding()}
    return Path(out_dir) / f"ripple-select-{safe_name(model)}-{spec.set_name}-{_hash(settings)}.jsonl"


def selection_header(model: str, spec: RippleSpec) -> dict:
    return {"model": model, "set": spec.set_name, "format": FORMAT, "derivation": DERIVATION,
            "cap": spec.max_per_criterion, "rules": _hash(_deciding())}


def select(lm, spec: RippleSpec, out_dir: Path, progress=None,
           screen: bool = True) -> list[tuple[EvalRecord, dict]]:
    """The first spec.n usable records of the pool with their derivations, screening (and recording) more as
    needed; without `screen`, only those the selection file already holds (possibly fewer; `lm` may then be the
    model's name)."""
    name = getattr(lm, "name", lm)
    path = selection_path(name, spec, out_dir)
    if screen:
        header_row(path, selection_header(name, spec))
    done = read_rows(path)
    records = pool(spec.set_name)
    chosen = []
    i = 0
    while len(chosen) < spec.n and i < len(records):
        chunk = records[i:i + SCREEN_CHUNK]
        todo = [r for r in chunk if _key(r) not in done]
        if todo and not screen:
            break
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
    if len(chosen) < spec.n and screen:
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
        row = {"key": _key(rec), "use": use, "reason": reason}  # a left-out one: why only
        if use:
            row.update(derivation=d.to_dict(), pre=list(counterfact_rates(lm, rec.request)))
        rows.append(row)
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
                    batch: int | None = None, run: bool = True) -> RippleEvaluation:
    """Every method (and IN_CONTEXT) on the selected edits; the share table (ripple.share_table). `batch`: edits
    per work item (default 1 in process, each row on disk as its edit finishes; 5 on Ray). Without `run`, the table
    of the rows already in the files (each method's `edits` may be fewer than n), nothing edited or screened."""
    if spec.n < 1:
        raise EditkitError("the number of edits must be at least 1")
    methods = [m.strip().lower() for m in methods if m.strip()]
    if not methods:
        raise EditkitError("give at least one method")
    backend = backend or Backend()
    batch = batch or (5 if backend.ray else 1)
    hps = method_hparams(lm, methods, hparams)
    out_dir = results_dir(lm, out_dir)
    chosen = select(lm, spec, out_dir, part(progress, 0.0, 0.2) if progress else None, screen=run)
    if not chosen:
        raise EditkitError(f"no selected edit in {out_dir} yet: run without --report-only first")
    facts = {_key(rec): row["derivation"]["facts"] for rec, row in chosen}
    settings = {m: method_settings(lm.name, m, hps[m], spec) for m in methods}
    paths = {m: results_path(lm.name, m, hps[m], spec, out_dir) for m in methods}
    if run:
        for m in methods:
            header_row(paths[m], settings[m])
    # a row stands for the facts it measured: one whose record's facts have changed since (a rule rephrased) is
    # measured again, while the rows of every other record are kept
    stamp = {k: facts_stamp(fs) for k, fs in facts.items()}
    done = {m: read_rows(paths[m], keep=lambda r: r.get("facts") == stamp.get(r.get("key"))) for m in methods}
    order = {_key(rec): i for i, (rec, _) in enumerate(chosen)}
    chunks = []  # (position of its first edit, method index, method, [(rec, row)])
    for j, m in enumerate(methods):
        todo = [(rec, row) for rec, row in chosen if _key(rec) not in done[m]]
        chunks += [(order[_key(todo[i][0])], j, m, todo[i:i + batch]) for i in range(0, len(todo), batch)]
    chunks.sort(key=lambda c: c[:2])  # edit by edit, the methods interleaved: an interruption leaves paired rows
    items = [Item(ripple_batch, (m, [rec.request for rec, _ in part_], [facts[_key(rec)] for rec, _ in part_],
                                 [row["pre"] for _, row in part_], hps[m]), label=f"{m}: {len(part_)} edit(s)")
             for _, _, m, part_ in chunks]
    where = [(m, [_key(rec) for rec, _ in part_]) for _, _, m, part_ in chunks]

    def written(j: int, rows: list[dict]) -> None:
        m, keys = where[j]
        for key, row in zip(keys, rows):
            row = {"key": key, "facts": stamp[key], **row}
            append_row(paths[m], row)
            done[m][key] = row

    if run:
        run_items(lm, items, backend, part(progress, 0.2, 1.0) if progress else None, done=written)
    return _tabulate(lm.name, chosen, done, spec, paths)


def method_hparams(model, methods: list[str], hparams: dict | None = None) -> dict:
    """Each method's complete hyperparameters for `model` (a loaded model or its name): today's defaults with
    `hparams[method]`; None for the in-context reference."""
    return {m: None if m == IN_CONTEXT else load_hparams(m, model, (hparams or {}).get(m)) for m in methods}


def method_settings(model: str, method: str, hp, spec: RippleSpec) -> dict:
    """What a method's results file is headed by (and, less model, set and method, named by)."""
    return {"format": FORMAT, "model": model, "set": spec.set_name, "method": method,
            "hp": hp.recorded() if hp else None, "n_cap": spec.max_per_criterion}


def results_path(model: str, method: str, hp, spec: RippleSpec, out_dir: Path) -> Path:
    """A method's results file under these settings: its name carries a hash of the recorded hyperparameters."""
    settings = method_settings(model, method, hp, spec)
    key = _hash({'format': FORMAT, 'hp': settings['hp'], 'n_cap': spec.max_per_criterion})
    return Path(out_dir) / f"ripple-{safe_name(method)}-{safe_name(model)}-{spec.set_name}-{key}.jsonl"


def tabulate(model: str, methods: list[str], spec: RippleSpec, hparams: dict | None = None,
             out_dir=None) -> RippleEvaluation:
    """The table of the rows already in the files of `model` (its name; no model is loaded, nothing is edited):
    what `evaluate_ripple(..., run=False)` reports, for checks of shipped tables (evaluation/manifest.py)."""
    out_dir = Path(out_dir) if out_dir else ASSETS / "results" / "ripple" / safe_name(model)
    methods = [m.strip().lower() for m in methods if m.strip()]
    hps = method_hparams(model, methods, hparams)
    chosen = select(model, spec, out_dir, screen=False)
    paths = {m: results_path(model, m, hps[m], spec, out_dir) for m in methods}
    stamp = {_key(rec): facts_stamp(row["derivation"]["facts"]) for rec, row in chosen}
    done = {m: read_rows(paths[m], keep=lambda r: r.get("facts") == stamp.get(r.get("key"))) for m in methods}
    return _tabulate(model, chosen, done, spec, paths)


def _tabulate(model: str, chosen: list, done: dict, spec: RippleSpec, paths: dict) -> RippleEvaluation:
    """The share table of each method's rows over the chosen edits, the facts a rule table keeps (`kept`)."""
    masks = {_key(rec): [kept(f, row["derivation"]["relation"]) for f in row["derivation"]["facts"]]
             for rec, row in chosen}
    facts = {k: [f for f, ok in zip(row["derivation"]["facts"], masks[k]) if ok]
             for k, row in ((_key(rec), row) for rec, row in chosen)}
    rows = {m: [{**done[m][_key(rec)], "outcomes": [o for o, ok in zip(done[m][_key(rec)]["outcomes"],
                                                                        masks[_key(rec)]) if ok]}
                for rec, _ in chosen if _key(rec) in done[m]] for m in done}
    n_facts = {c: sum(1 for fs in facts.values() for f in fs if f["criterion"] == c) for c in
               ("logical", "aliasing", "specificity", "preservation")}
    return RippleEvaluation(model, spec.set_name, len(chosen), n_facts, spec.against,
                            share_table(rows, facts, spec.against), {m: str(p) for m, p in paths.items()},
                            {m: len(r) for m, r in rows.items()})
