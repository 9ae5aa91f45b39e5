"""Cheaper lesson traces against the traces' own noise: can a student tell them apart? (issue 38)

A causal trace is a mean over random noise draws, so the pack's own result would change with another seed. This
measures each cheaper variant against that floor, on what a student is graded on:

- the fact's traces (steps 2-4): the pack's (exact, 10 samples, seed 1) against the fast mode (bfloat16, same
  draws) and against the same exact trace with other draws (seed 2): the hidden trace's early site, the grade of
  every cell (step 2), the MLP and attention traces' subject peak (step 4's memories, the sweep's row), the
  severing verdict (step 3) and the largest score difference;
- the re-traces of the edited models (step 6): 10 and 5 noise samples (seed 1, the pack's draws first) and 10 with
  other draws (seed 2), each against a reference of 30 other draws (seed 3): how often each finds the reference's
  early site and grades every cell as it does. A variant a student cannot tell apart agrees with the reference
  about as often as the pack's own size does.

    python benchmarks/lesson_noise.py [--facts 20] [--skip traces|retraces]

Facts: the shipped pack's facts, the bench report's fact and the first --facts known facts of the model
(data/facts.py); re-traces on the shipped and bench facts, every target and the shipped pack's methods. One JSON
line per item, then a summary line.
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


def _cells_same(a: dict, b: dict) -> bool:
    T, L = len(a["scores"]), len(a["scores"][0])
    return all(grading.grade_cell(a, t, l).verdict == grading.grade_cell(b, t, l).verdict
               for t in range(T) for l in range(L))


def _max_diff(a: dict, b: dict) -> float:
    return round(max(abs(x - y) for ra, rb in zip(a["scores"], b["scores"]) for x, y in zip(ra, rb)), 4)


def _compare(pack_t: dict, other: dict) -> dict:
    a, b = pack_t["traces"], other["traces"]
    out = {"same_early": grading.sites(a["hidden"])["early"] == grading.sites(b["hidden"])["early"],
           "same_cell_grades": _cells_same(a["hidden"], b["hidden"]),
           "same_mlp_peak": compute.subject_peak(a["mlp"]) == compute.subject_peak(b["mlp"]),
           "same_attn_peak": compute.subject_peak(a["attn"]) == compute.subject_peak(b["attn"]),
           "same_severing": bool(pack_t["severing"] and other["severing"]
                                 and grading.severing_truth(pack_t["severing"])
                                 == grading.severing_truth(other["severing"])),
           "max_abs_diff": max(_max_diff(a[k], b[k]) for k in compute.KINDS)}
    return out


def _facts(lm, n: int) -> list[tuple[str, str, str]]:
    from editkit.data.facts import predicted_facts
    from editkit.evaluation.bench_report import FACT
    from editkit.lesson.facts import read_facts

    lesson = read_facts(str(SHIPPED / "facts.json")) + read_facts([FACT])
    out = [(f.request.rewrite, f.request.subject, f.request.target_true) for f in lesson]
    out += [(f["prompt"], f["subject"], f["answer"]) for f in predicted_facts(lm, n)]
    return out


def traces(lm, n: int) -> dict:
    variants = {"fast (bfloat16)": dict(precision="bfloat16", seed=1), "exact, other draws": dict(seed=2)}
    rows = []
    for prompt, subject, answer in _facts(lm, n):
        base = compute.traces(lm, prompt, subject, answer, compute.Settings(), precision="float32")  # the exact
        for name, v in variants.items():
            other = compute.traces(lm, prompt, subject, answer, compute.Settings(seed=v["seed"]),
                                   precision=v.get("precision", "float32"))
            row = {"check": "trace", "prompt": prompt, "variant": name, **_compare(base, other)}
            rows.append(row)
            _say(row)
    return _summary(rows, ("same_early", "same_cell_grades", "same_mlp_peak", "same_attn_peak", "same_severing"))


def retraces(lm, pack: Pack) -> dict:
    from lesson_sizes import edits  # benchmarks/: the same edits as its re-trace check

    variants = {"10 samples (pack)": (10, 1), "5 samples": (5, 1), "10 samples, other draws": (10, 2)}
    rows = []
    for f, target, m, record, delta in edits(lm, pack):
        ref = compute.retrace(lm, record, delta, compute.Settings(samples=30, seed=3, retrace_samples=None))
        pack_t = None
        for name, (k, seed) in variants.items():
            t = compute.retrace(lm, record, delta, compute.Settings(samples=k, seed=seed, retrace_samples=None))
            pack_t = pack_t or t
            row = {"check": "retrace", "fact": f.request.subject, "target": target.strip(), "method": m,
                   "variant": name, "early_ref": list(grading.sites(ref)["early"]),
                   "early": list(grading.sites(t)["early"]),
                   "same_early_as_ref": grading.sites(ref)["early"] == grading.sites(t)["early"],
                   "same_cell_grades_as_ref": _cells_same(ref, t),
                   "same_early_as_pack": grading.sites(pack_t)["early"] == grading.sites(t)["early"],
                   "max_abs_diff_ref": _max_diff(ref, t)}
            rows.append(row)
            _say(row)
    return _summary(rows, ("same_early_as_ref", "same_cell_grades_as_ref", "same_early_as_pack"),
                    diff="max_abs_diff_ref")


def _summary(rows: list[dict], keys: tuple, diff: str = "max_abs_diff") -> dict:
    out = {}
    for name in dict.fromkeys(r["variant"] for r in rows):
        rs = [r for r in rows if r["variant"] == name]
        out[name] = {"n": len(rs), **{k: sum(bool(r[k]) for r in rs) for k in keys},
                     diff: max(r[diff] for r in rs)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--facts", type=int, default=20, help="known facts traced beside the lesson's own")
    p.add_argument("--skip", default="", help="checks to skip: traces, retraces")
    args = p.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    pack = Pack.open(SHIPPED)
    lm = compute.load(pack.model)
    summary = {}
    if "traces" not in skip:
        summary["traces"] = traces(lm, args.facts)
    if "retraces" not in skip:
        summary["retraces"] = retraces(lm, pack)
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
