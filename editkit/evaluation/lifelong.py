"""Lifelong-editing results as tables and curves: several methods' runs (evaluation/sequential.py's LifelongRun)
on the same records, as `evaluate --sequential` writes them (`Lifelong`).

`SHIPPED` is the run reported in the manual (docs/results/lifelong.md: the embedded model, 500 CounterFact edits,
ROME one by one, the others in batches of 25), so the page can draw the four methods' curves without an hour of
computing; `SHIPPED_STABILISERS` is ROME's 120 edits with and without the stabilisers (a run's key is then
"method+variant", with its own label); `SHIPPED_1000` the batch methods over 1,000 edits in batches of 100.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..core.errors import EditkitError
from ..core.paths import ASSETS
from ..core.results import JsonObject, Result, frame, json_input
from ..figures.labels import labelled
from ..figures.lifelong import layer_figure, lifelong_figure
from .metrics import harmonic_mean
from .sequential import LifelongRun

SHIPPED = ASSETS / "results" / "lifelong-gemma-3-270m.json"
# ROME one by one, 120 edits: the defaults and with each stabiliser ("rome+encore", "rome+nas";
# docs/results/lifelong.md)
SHIPPED_STABILISERS = ASSETS / "results" / "lifelong-rome-stabilisers-gemma-3-270m.json"
# 1,000 counterfact-edit records in batches of 100 (docs/results/lifelong.md: the batch methods and the
# stabilised variants; benchmarks/lifelong_merge.py joined the runs, two of them stopped before their end)
SHIPPED_1000 = ASSETS / "results" / "lifelong-1000-gemma-3-270m.json"


def styled(results: dict[str, LifelongRun]) -> dict[str, LifelongRun]:
    """The runs with their registered method's label and colour filled in (figures/lifelong.py draws a run in the
    colour its data names); a variant such as "rome+encore" keeps its own label and takes its method's colour,
    drawn with a dash of its own."""
    from ..editing.methods import get

    out = {}
    for key, res in results.items():
        try:
            m = get(res.method or key)
        except EditkitError:
            out[key] = res
            continue
        out[key] = replace(res, label=res.label or m.label, color=res.color or m.color)
    return out


def final_table(results: dict[str, LifelongRun]) -> list[dict]:
    """One row per method: the last checkpoint (every edit measured once the run is complete), rates x100,
    Score = harmonic mean of efficacy, generalization and specificity (PMET Table 1), fluency x100."""
    table = []
    for method, res in results.items():
        last = res.last
        if last is None:
            continue
        rates = [100 * last[k] if last.get(k) is not None else None
                 for k in ("efficacy", "generalization", "specificity")]
        seconds = res.edit_seconds
        table.append({
            "method": method, "label": res.label, "edits": last["edit"], "batch": res.batch,
            "complete": bool(res.complete), "measured": last.get("measured"),
            "efficacy": rates[0], "generalization": rates[1], "specificity": rates[2],
            "score": harmonic_mean(rates) if all(r is not None for r in rates) else None,
            "kept": _x100(last.get("kept")), "locality": _x100(last.get("locality")),
            "retention": 100 * last["retention"] if last.get("retention") is not None else None,
            "fluency": 100 * last["fluency"] if _finite(last.get("fluency")) else None,
            "base_fluency": 100 * res.base["fluency"] if _finite(res.base.get("fluency")) else None,
            "perplexity": last.get("perplexity"), "base_perplexity": res.base_perplexity,
            "perplexity_ratio": last.get("perplexity_ratio"),
            "total_relative_norm": last.get("total_relative_norm"),
            "max_relative_norm": last.get("max_relative_norm"),
            "seconds_per_edit": (sum(seconds) / last["edit"]) if seconds and last["edit"] else None,
            "collapsed_at": res.collapsed_at})
    return table


def _x100(x):
    return 100 * x if _finite(x) else None


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


@dataclass
class Lifelong(Result):
    """Several methods' lifelong runs on the first `n` records of `set` (what `evaluate --sequential --save` writes
    and assets/results/lifelong-*.json ship): method -> LifelongRun, and the final table."""

    model: str
    set: str
    n: int
    runs: dict[str, LifelongRun]
    table: list[dict]

    _show = "table"

    def headline(self) -> str:
        return f"{len(self.runs)} methods, {self.n} {self.set} edits on {self.model}"

    def to_json(self) -> JsonObject:
        return {"model": self.model, "set": self.set, "n": self.n,
                "sequential": {m: r.to_json() for m, r in self.runs.items()}, "table": self.table}

    @classmethod
    def _from_json(cls, d: dict) -> "Lifelong":
        return cls(d["model"], d["set"], d["n"], {m: LifelongRun._from_json(r) for m, r in d["sequential"].items()},
                   d["table"])

    @classmethod
    def of(cls, runs: dict[str, LifelongRun], set_name: str) -> "Lifelong":
        """The runs (of one model on the same records) with their final table."""
        first = next(iter(runs.values()))
        return cls(first.model, set_name, first.n, runs, final_table(runs))

    def to_frame(self):
        """The final table: one row per method, rates x100 with each header naming its metric's family."""
        return frame(labelled(self.table))

    def figure(self):
        """One panel per metric over the edits so far, one curve per method in its colour."""
        return lifelong_figure({m: r.to_json() for m, r in styled(self.runs).items()})

    def conclusion(self) -> str:
        """The runs in one sentence: the first to collapse, the one keeping the most edits (module `conclusion`)."""
        return conclusion(self.runs)

    def layer_figure(self):
        """Per edited matrix: ||dW|| / ||W|| and cond(W + dW) after each checkpoint, one curve per method."""
        return layer_figure({m: r.to_json() for m, r in styled(self.runs).items()})


def load_results(path=SHIPPED) -> dict[str, LifelongRun]:
    """method -> run, from a file written by `evaluate --sequential --save` (or the shipped one)."""
    try:
        data = json_input(path)
    except EditkitError as exc:
        raise EditkitError(f"cannot read lifelong results {path}: {exc}") from None
    results = data.get("sequential", data) if isinstance(data, dict) else None
    if not isinstance(results, dict) or not all(isinstance(r, dict) and "rows" in r for r in results.values()):
        raise EditkitError(f"{path} holds no lifelong results (expected the output of evaluate --sequential)")
    return {m: LifelongRun._from_json(r) for m, r in results.items()}


def conclusion(runs: dict[str, LifelongRun]) -> str:
    """Lifelong runs (method -> run) in one sentence: which collapsed first, and which keeps the most edits by
    efficacy over the edits measured (binomial noise, verdict.rates) at the last checkpoint every run reached (a
    run stopped early is not set against the others' later, longer ends), else at each run's last. Where two or
    more runs are complete, runs stopped before their end are named and left out of the ranking (one stopped run
    would otherwise pull every comparison back to where it stopped)."""
    from .verdict import and_list, rates

    label = {m: r.label or m for m, r in runs.items()}
    hit = {m: r.collapsed_at for m, r in runs.items() if r.collapsed_at is not None}
    order = sorted(hit, key=hit.get)
    head = (f"{label[order[0]]} collapses first (by edit {hit[order[0]]})" if hit else "None of them collapses")
    if len(order) > 1:  # every collapse is named: the later ones are as much a finding as the first
        head += ", then " + and_list([f"{label[m]} (by edit {hit[m]})" for m in order[1:]])
    done = {m: r for m, r in runs.items() if r.complete}
    stopped = [m for m in runs if m not in done and runs[m].rows]
    tail = ""
    if len(done) >= 2 and stopped:
        tail = " " + _stopped_clause({m: (label[m], runs[m].rows[-1]["edit"]) for m in stopped})
        runs = done
    measured = {m: {row["edit"]: row for row in r.rows if row.get("efficacy") is not None} for m, r in runs.items()}
    common = set.intersection(*(set(rows) for rows in measured.values())) if measured else set()
    if common:  # runs that stopped early are compared where every run was measured, not each at its own end
        at = max(common)
        last = {m: rows[at] for m, rows in measured.items()}
        ends = {max(rows) for rows in measured.values()}
        when, why = f"after {at:,} edits", "" if ends == {at} else "the last checkpoint all runs reached; "
    else:
        last = {m: rows[max(rows)] if rows else None for m, rows in measured.items()}
        if not last or any(row is None for row in last.values()):
            return head + "."
        when, why = "at each run's last checkpoint", ""
    ranked = rates({m: row["efficacy"] for m, row in last.items()},
                   {m: row.get("measured") or 1 for m, row in last.items()},
                   f"efficacy {when} ({why}the share of the edits measured that still hold)", digits=3, unit="%",
                   labels=label, scale=100)
    return f"{head}. {ranked.sentence()}{tail}"


def without_run(runs: dict[str, LifelongRun], batch_only: bool = False) -> str:
    """A sentence naming the registered methods (only those that edit in batches with `batch_only`) that have no
    run in `runs`, so a page shows a method added since the file was made as such; "" when every one has a run."""
    from ..editing.methods import all_methods
    from .verdict import and_list

    have = {r.method or key for key, r in runs.items()}
    missing = [m for m in all_methods() if m.name not in have and (m.batch or not batch_only)]
    if not missing:
        return ""
    names = ",".join(m.name for m in missing)
    verb = "has" if len(missing) == 1 else "have"
    return (f"{and_list([m.label for m in missing])} {verb} no run in this file (added since, or not run): "
            f"`editkit evaluate --sequential --methods {names} ...` with this run's settings makes one.")


def _stopped_clause(stopped: dict[str, tuple[str, int]]) -> str:
    """'X stopped after 600 edits and is not ranked.' for runs (key -> (label, last edit)) left out."""
    parts = [f"{name} stopped after {edit:,} edits" for name, edit in stopped.values()]
    verb = "is" if len(parts) == 1 else "are"
    return f"{'; '.join(parts)} and {verb} not ranked."
