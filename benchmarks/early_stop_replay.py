"""Early-stop rules of the target optimisation on validation records, by replay (docs/results/speed.md, "One-request
edits under 5 s").

An early stop only cuts the plain optimisation short (tests/test_stabilisers.py: the same delta, bit for bit), so
each record is optimized once with every stop rule off, step by step, and every rule's target vectors are the
recorded delta at the step where that rule stops. Each distinct stop step is then solved and measured as an edit
(one request per edit, the unedited model, generation off). Appends one JSON line per record to OUT (a rerun
resumes after the records already there):

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 19 python benchmarks/early_stop_replay.py METHOD N OUT.jsonl \
        [--rules top1=2,prob=0.5] [--set counterfact-val] [--model gemma-3-270m]

Each line: case_id, the plain run's steps, and per rule ("plain" and each of --rules) its steps and the record's
metrics (evaluation/measure.record_metrics). Rules: top1=n (v_stop_top1), prob=p (v_stop_prob), stall=r
(v_stop_stall), steps=k (v_num_grad_steps)."""
import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIELDS = {"top1": ("v_stop_top1", int), "prob": ("v_stop_prob", float), "stall": ("v_stop_stall", float),
          "steps": ("v_num_grad_steps", int)}
OFF = {"v_stop_top1": 0, "v_stop_prob": 0.0, "v_stop_stall": 0.0}


def parse_rules(text: str) -> dict:
    rules = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.partition("=")
        if name not in FIELDS or not value:
            raise SystemExit(f"unknown rule {part!r}; use {', '.join(f'{k}=V' for k in FIELDS)}")
        field, kind = FIELDS[name]
        rules[part] = {**OFF, field: kind(value)}
    return rules


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("method")
    ap.add_argument("n", type=int)
    ap.add_argument("out", type=Path)
    ap.add_argument("--rules", default="top1=1,top1=2,top1=3,prob=0.5,prob=0.7,prob=0.9,steps=5,steps=8")
    ap.add_argument("--set", default="counterfact-val")
    ap.add_argument("--model", default="gemma-3-270m")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    import editkit
    import editkit.editing.methods.pmet as pmet
    import editkit.editing.spread as spread
    import editkit.editing.targets as targets
    from editkit.editing.defaults import load_hparams
    from editkit.editing.target_stops import Tracker, stabiliser_stops
    from editkit.evaluation.datasets import load_eval_set
    from editkit.evaluation.measure import EvalSpec, edit_and_measure, measure, wikitext_idf

    rules = parse_rules(args.rules)
    log, state = [], {"replay": None, "result": None}
    loss_terms, optimize = targets.loss_terms, targets.optimize_targets_batch

    def logged(lm, rows, deltas, init, reference, kl0, act):  # every loss evaluation: its deltas and signals
        out = loss_terms(lm, rows, deltas, init, reference, kl0, act)
        log.append({"deltas": {s: d.detach().clone() for s, d in deltas.items()}, "tok_logp": out[0].detach(),
                    "argmax": out[1].clone(), "rows": rows})
        return out

    def replayed(lm, requests, layer, sites, hp, adaptive=False, progress=None, reference=False):
        if state["replay"] is None:  # the plain run, recorded
            log.clear()
            state["result"] = optimize(lm, requests, layer, sites, hp, adaptive, progress, reference)
            return state["result"]
        k, res = state["replay"], state["result"][0]
        cut = {}
        for s in sites:
            d = log[k]["deltas"][s][0]
            cut[s] = targets.SiteTarget(res.at(s).init, d.clone(), res.at(s).init + d)
        return [targets.Targets(cut, [dict(e) for e in res.losses[:k + 1]])]

    targets.loss_terms = logged
    for module in (targets, spread, pmet):
        module.optimize_targets_batch = replayed

    def stop_step(hp) -> int:
        """Where `hp`'s rules stop on the recorded plain trajectory (the plain run's own end otherwise)."""
        res = state["result"][0]
        n_steps = min(len(res.losses), hp.v_num_grad_steps)
        tracker = Tracker.of(1, torch.device("cpu"))
        for k in range(n_steps):
            e = log[k]
            loss = torch.tensor([res.losses[k]["loss"]])
            stop = stabiliser_stops(hp, e["rows"], [0], e["tok_logp"], e["argmax"], loss, tracker)
            if stop is not None and bool(stop[0]):
                return k
        return n_steps - 1

    lm = editkit.load(args.model)
    records = load_eval_set(args.set, args.n)
    spec = EvalSpec(set_name=args.set, n=args.n, batch=1, n_gen=0, greedy_tokens=0)
    done = set()
    if args.out.exists():
        done = {json.loads(line)["case_id"] for line in args.out.read_text().splitlines() if line.strip()}
    wikitext_idf()
    for i, rec in enumerate(records):
        if rec.request.case_id in done:
            continue
        pre = [measure(lm, rec, 0, spec.gen_tokens, 0)]
        state["replay"] = None
        plain = edit_and_measure(lm, args.method, [rec], OFF, spec, pre=pre)[0]["metrics"]
        steps = len(state["result"][0].losses)
        row = {"case_id": rec.request.case_id, "i": i, "plain_steps": steps,
               "rules": {"plain": {"steps": steps, "metrics": plain}}}
        by_step = {steps - 1: plain}  # rules that stop at the same step make the same edit
        for name, overrides in rules.items():
            k = stop_step(load_hparams(args.method, lm, overrides))
            if k not in by_step:
                state["replay"] = k
                by_step[k] = edit_and_measure(lm, args.method, [rec], overrides, spec, pre=pre)[0]["metrics"]
            row["rules"][name] = {"steps": k + 1, "metrics": by_step[k]}
        with args.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(args.method, i, rec.request.case_id,
              {n: (v["steps"], v["metrics"]["post_efficacy"], round(v["metrics"]["post_generalization"], 2),
                   round(v["metrics"]["post_specificity"], 2)) for n, v in row["rules"].items()}, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
