"""Where a one-request co-edit spends its time, against MEMIT, on validation facts that have relations to keep.

    python benchmarks/coedit_time.py --model gemma-3-270m                       # the four facts of ripple.md
    python benchmarks/coedit_time.py --model gemma-3-270m --cases 253,4405 --settings '{"kept_hold_stop": true}'

For each counterfact-val case: MEMIT, co-edit without kept relations (`max_kept` 0) and co-edit with the
defaults (or with `--settings` on top), each timed around `run_edit` in one process after a warm-up edit, with
the requests written, the steps each request ran, and the edit's split (deriving the implications and the kept
relations, the target optimisation, the spread). Run it on an idle machine: the numbers are wall seconds.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

import editkit
from editkit.editing.defaults import load_hparams
from editkit.editing.methods import coedit
from editkit.editing.run import run_edit
from editkit.evaluation.datasets import load_eval_set

CASES = "253,4405,2585,6964"  # Gemma validation facts whose subjects have relations to keep (ripple.md)


def derivation_seconds(lm, request, hp) -> tuple[float, float]:
    t0 = time.perf_counter()
    coedit.implied_requests(lm, [request], hp)
    t1 = time.perf_counter()
    coedit.kept_requests(lm, [request], hp)
    return t1 - t0, time.perf_counter() - t1


def one(lm, name: str, method: str, request, settings: dict, derives: bool = False) -> str:
    t0 = time.perf_counter()
    res = run_edit(lm, method, [request], settings)
    wall = time.perf_counter() - t0
    steps = [len(r.losses) for r in res.per_request]
    text = f"{name} {wall:.2f} s ({len(res.requests)} req, steps {steps}, targets {res.seconds_targets:.2f} s, " \
           f"spread {res.seconds_spread:.2f} s"
    if derives:  # co-edit's derivations run inside the edit, before its targets; timed apart here
        implied, kept = derivation_seconds(lm, request, load_hparams("coedit", lm, settings))
        text += f"; of which deriving implied {implied:.2f} s, kept {kept:.2f} s"
    return text + ")"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--cases", default=CASES, help="counterfact-val case ids, comma-separated")
    ap.add_argument("--settings", default="{}", help="co-edit overrides (JSON) for the 'coedit' row")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    lm = editkit.load(args.model)
    want = args.cases.split(",")
    requests = [r.request for r in load_eval_set("counterfact-val") if str(r.request.case_id) in want]
    run_edit(lm, "memit", requests[:1], {})  # warm-up: the statistics and templates are read once
    for r in requests:
        rows = [one(lm, "memit", "memit", r, {}), one(lm, "coedit-nokeep", "coedit", r, {"max_kept": 0}, True),
                one(lm, "coedit", "coedit", r, json.loads(args.settings), True)]
        print(f"{r.subject}:\n  " + "\n  ".join(rows), flush=True)


if __name__ == "__main__":
    main()
