"""Smaller lesson parts against the pack's sizes, on the shipped pack's facts: does a student see the same result?
(issue 38: compute the re-traces and the layer sweep at the sizes a student can tell apart.)

    python benchmarks/lesson_sizes.py                     # all three checks (the re-traces take ~15 CPU min)
    python benchmarks/lesson_sizes.py --skip retraces     # only the two read from the shipped parts (seconds)

- re-traces with fewer noise samples: each fact, target and method of the shipped pack (and bench report's fact)
  edited with today's code and re-traced (fast mode, as packs build them) at 10 samples and at each of --samples;
  per re-trace the early site (the cell step 6 grades and each method's conclusion names), whether every cell of
  the heatmap gets the same grade, and the largest score difference from the 10-sample re-trace;
- a sparser layer sweep: from each shipped sweep's rows (every layer's row is computed on its own, so a sweep of
  fewer layers has exactly these rows), the best layer and the sweep's verdict (grading.sweep_truth) with every
  other layer (even, odd) and every third layer;
- shorter greedy continuations: each shipped edit's continuations (before and after) cut to --tokens tokens
  (re-tokenized from the stored text), and whether the generation-based verdict (metrics.generation_success)
  changes.

Prints one JSON line per item and a summary line per check.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from editkit.lesson import compute, grading  # noqa: E402
from editkit.lesson.pack import SHIPPED, Pack  # noqa: E402


def _say(row: dict) -> None:
    print(json.dumps(row), flush=True)


def edits(lm, pack: Pack):
    """(fact, target, method, record, delta) for each fact of the shipped pack and the bench report's, each of its
    new targets and each of the pack's methods: the edits whose re-traces the benchmarks compare."""
    from editkit.editing.run import run_edit
    from editkit.evaluation.bench_report import FACT
    from editkit.lesson.facts import read_facts

    with compute.shared_targets():
        for f in read_facts(str(SHIPPED / "facts.json")) + read_facts([FACT]):
            for target in f.targets:
                record = compute.with_target(f.record, target)
                for m in pack.manifest["method_names"]:
                    with compute.session(lm):
                        delta = run_edit(lm, m, [record.request]).delta
                    yield f, target, m, record, delta


def retraces(lm, pack: Pack, samples: list[int]) -> dict:
    rows = []
    for f, target, m, record, delta in edits(lm, pack):
        full = compute.retrace(lm, record, delta, compute.Settings(samples=10, retrace_samples=None))
        for k in samples:
            small = compute.retrace(lm, record, delta, compute.Settings(samples=k, retrace_samples=None))
            T, L = len(full["scores"]), len(full["scores"][0])
            row = {"check": "retrace", "fact": f.request.subject, "target": target.strip(), "method": m,
                   "samples": k,
                   "early_10": list(grading.sites(full)["early"]),
                   "early": list(grading.sites(small)["early"]),
                   "same_grades": all(grading.grade_cell(full, t, l).verdict
                                      == grading.grade_cell(small, t, l).verdict
                                      for t in range(T) for l in range(L)),
                   "max_abs_diff": round(max(abs(a - b) for ra, rb in zip(full["scores"], small["scores"])
                                             for a, b in zip(ra, rb)), 4)}
            row["same_early"] = row["early"] == row["early_10"]
            rows.append(row)
            _say(row)
    out = {}
    for k in samples:
        rs = [r for r in rows if r["samples"] == k]
        out[k] = {"retraces": len(rs), "same_early_site": sum(r["same_early"] for r in rs),
                  "same_grade_of_every_cell": sum(r["same_grades"] for r in rs),
                  "max_abs_diff": max(r["max_abs_diff"] for r in rs)}
    return out


def sweeps(pack: Pack) -> dict:
    keeps = {"even layers": lambda l: l % 2 == 0, "odd layers": lambda l: l % 2 == 1,
             "every third layer": lambda l: l % 3 == 1}
    out = {name: {"facts": 0, "same_best_layer": 0, "same_verdict": 0} for name in keeps}
    for fid in pack.fact_ids:
        sweep = pack.part(fid, "sweep")
        if not sweep:
            continue
        for name, keep in keeps.items():
            rows = [r for r in sweep["rows"] if keep(r["layer"])]
            best = max(rows, key=lambda r: sum(r[f"{g}_magnitude"] or 0
                                               for g in ("efficacy", "generalization", "specificity")))["layer"]
            sparse = {**sweep, "rows": rows, "layers": [r["layer"] for r in rows], "best_layer": best}
            row = {"check": "sweep", "fact": fid, "layers": name, "best_layer_all": sweep["best_layer"],
                   "best_layer": best, "verdict_all": grading.sweep_truth(sweep),
                   "verdict": grading.sweep_truth(sparse)}
            _say(row)
            out[name]["facts"] += 1
            out[name]["same_best_layer"] += row["best_layer"] == row["best_layer_all"]
            out[name]["same_verdict"] += row["verdict"] == row["verdict_all"]
    return out


def continuations(lm, pack: Pack, tokens: list[int]) -> dict:
    from editkit.evaluation.metrics import generation_success

    out = {}
    for k in tokens:
        changed, total = 0, 0
        for fid in pack.fact_ids:
            fact = pack.fact(fid)
            for t in range(len(fact["targets"])):
                for m in pack.manifest["method_names"]:
                    e = pack.part(fid, f"edit-{t}-{m}")
                    for when in ("pre", "post"):
                        for group in ("rewrite", "paraphrase"):
                            for text in e["greedy"][when][group]:
                                cut = lm.tok.decode(lm.tok(text, add_special_tokens=False)["input_ids"][:k])
                                total += 1
                                if generation_success(text, e["target_new"], e["target_true"]) != \
                                        generation_success(cut, e["target_new"], e["target_true"]):
                                    changed += 1
                                    _say({"check": "greedy", "fact": fid, "part": f"edit-{t}-{m}", "when": when,
                                          "tokens": k, "text": text})
        out[k] = {"continuations": total, "verdicts_changed": changed}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", default="5,3", help="re-trace noise samples to compare with 10")
    p.add_argument("--tokens", default="10,15", help="greedy tokens to compare with the pack's")
    p.add_argument("--skip", default="", help="checks to skip: retraces, sweeps, greedy")
    args = p.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    pack = Pack.open(SHIPPED)
    lm = compute.load(pack.model)
    summary = {}
    if "sweeps" not in skip:
        summary["sweeps"] = sweeps(pack)
    if "greedy" not in skip:
        summary["greedy"] = continuations(lm, pack, [int(k) for k in args.tokens.split(",")])
    if "retraces" not in skip:
        summary["retraces"] = retraces(lm, pack, [int(k) for k in args.samples.split(",")])
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
