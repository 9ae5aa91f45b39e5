"""UltraEdit's hyperparameters on the Pareto front of efficacy and kept neighbours, on a validation set.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 nice -n 10 python benchmarks/ultraedit_pareto.py --model gemma-3-270m \
        --grid "lr=1e-6,2e-6,5e-6;layers=[12,13,14,15,16],[15,16]" --grid "ridge=0.1,10;lr=5e-6" --json out.json

Each --grid is a product grid (sweep.py's `name=v1,v2` parameters joined by ';'); the grids' union is measured
twice on the first --n records of --set (default counterfact-val, which is where settings are chosen):
- single: batches of 10 requests, each edited on the unedited model (each batch's measurement a cache entry under
  $EDITKIT_CACHE/ultraedit-pareto, so a rerun or a wider grid computes only what is new);
- sequence: all --n requests in batches of 10, one after another on the weights the earlier batches left, the
  running statistics carried (as evaluation/sequential.py runs them), measured once at the end (one cache entry
  per setting).
Both are measured with lifelong_measures.rates (one batched pass over the prompts, as lifelong runs
measure). Per setting and mode: efficacy, generalization, specificity after the edit, the paired change of specificity
(post - pre per record, with its 95% interval), `kept` (neighbourhood comparisons P(true) > P(new) that come out as
the unedited model's) and `kept_correct` (of the neighbourhood prompts the unedited model got right, the share still
right), and in sequence mode the perplexity ratio (WikiText-2, --ppl-tokens) and the largest ||dW|| / ||W||. A
setting "keeps specificity" in a mode when the interval of its paired change reaches 0. The rule (fixed before
any held-out measurement): among settings that keep specificity in both modes, the highest mean of the two
modes' efficacy; if none does, the best available: the highest mean over the two modes of efficacy +
specificity (the point of the front past which one more point of efficacy costs more than one point of
specificity), with the trade-off shown.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from editkit.core.cache import Store  # noqa: E402
from editkit.editing.defaults import load_hparams  # noqa: E402
from editkit.editing.run import run_edit  # noqa: E402
from editkit.evaluation.datasets import load_eval_set  # noqa: E402
from editkit.evaluation.lifelong_measures import perplexity, rates  # noqa: E402
from editkit.evaluation.metrics import mean_ci  # noqa: E402
from editkit.evaluation.sweep import grid, label, parse_params  # noqa: E402
from editkit.model.loading import load_model  # noqa: E402
from editkit.model.weights import applied, combined, fingerprint  # noqa: E402

BATCH = 10
STORE = Store("ultraedit-pareto", version=1)


def settings_of(grids: list[str]) -> list[dict]:
    out = []
    for g in grids:
        for s in grid(parse_params([p for p in g.split(";") if p.strip()])):
            if s not in out:
                out.append(s)
    return out


def _pct(values) -> dict:
    m, ci = mean_ci(values)
    return {"mean": None if math.isnan(m) else 100 * m, "ci95": None if math.isnan(ci) else 100 * ci}


def base_rates(lm, records) -> list[dict]:
    """The unedited model's rates per record (lifelong_measures.rates), cached."""
    path = STORE.path(f"{lm.name}-base", cases=[r.source for r in records], weights=fingerprint(lm))
    return STORE.get_or_build(path, lambda: rates(lm, records))


def single(lm, setting: dict, records, before: list[dict]) -> dict:
    """One setting in batches of 10, each edited on the unedited model; each batch's measured rates are a cache
    entry, so an interrupted setting resumes batch by batch."""
    hp = load_hparams("ultraedit", lm, setting)
    after = []
    for b in range(0, len(records), BATCH):
        chunk, pre = records[b:b + BATCH], before[b:b + BATCH]
        path = STORE.path(f"{lm.name}-single", hparams=hp.to_dict(), cases=[r.source for r in chunk],
                          weights=fingerprint(lm))

        def build(chunk=chunk, pre=pre):
            delta = run_edit(lm, "ultraedit", [r.request for r in chunk], hp).delta
            with applied(lm, delta):
                return rates(lm, chunk, original=[p["answers"] for p in pre])
        after += STORE.get_or_build(path, build)
    return summary(before, after)


def summary(before: list[dict], after: list[dict]) -> dict:
    """Rates x100 with 95% intervals; the paired change of specificity per record; kept and kept_correct against
    the unedited model's neighbourhood answers."""
    right = [float(t1) for a, b in zip(after, before)
             for t0, t1 in zip(b["answers"]["true_wins"], a["answers"]["true_wins"]) if t0]
    return {"efficacy": _pct([a["rewrite"] for a in after]), "generalization": _pct([a["paraphrase"] for a in after]),
            "specificity": _pct([a["neighborhood"] for a in after]),
            "unedited_efficacy": _pct([b["rewrite"] for b in before]),
            "unedited_generalization": _pct([b["paraphrase"] for b in before]),
            "unedited_specificity": _pct([b["neighborhood"] for b in before]),
            "change_specificity": _pct([a["neighborhood"] - b["neighborhood"] for a, b in zip(after, before)]),
            "kept": _pct([a["kept"] for a in after]), "kept_correct": _pct(right),
            "locality": _pct([a["locality"] for a in after]), "records": len(after)}


def sequence(lm, setting: dict, records, before: list[dict], ppl_tokens: int) -> dict:
    """One setting as a sequence of batches of 10, each edited on the weights the earlier ones left with the
    running statistics carried (as evaluation/sequential.py runs it), measured once at the end; the measurement and
    the accumulated delta's perplexity are one cache entry per setting."""
    hp = load_hparams("ultraedit", lm, setting)
    path = STORE.path(f"{lm.name}-sequence", hparams=hp.to_dict(), cases=[r.source for r in records],
                      weights=fingerprint(lm), ppl_tokens=ppl_tokens)

    def build():
        total, state = {}, None
        for b in range(0, len(records), BATCH):
            with applied(lm, total):
                res = run_edit(lm, "ultraedit", [r.request for r in records[b:b + BATCH]], hp, state=state)
            total, state = (combined([total, res.delta]) if total else dict(res.delta)), res.state
        params = dict(lm.model.named_parameters())
        with applied(lm, total):
            after = rates(lm, records, original=[b["answers"] for b in before])
            ppl = perplexity(lm, ppl_tokens)
        norm = max(float(d.norm() / params[n].detach().norm()) for n, d in total.items())
        return {"after": after, "perplexity": ppl, "max_relative_norm": norm}
    got = STORE.get_or_build(path, build)
    base_ppl = STORE.get_or_build(STORE.path(f"{lm.name}-perplexity", weights=fingerprint(lm), tokens=ppl_tokens),
                                  lambda: perplexity(lm, ppl_tokens))
    return {**summary(before, got["after"]), "perplexity_ratio": got["perplexity"] / base_ppl,
            "max_relative_norm": got["max_relative_norm"]}


def keeps(m: dict) -> bool:
    c = m["change_specificity"]
    return c["mean"] is not None and c["mean"] + (c["ci95"] or 0.0) >= 0.0


def choose(rows: list[dict]) -> tuple[int, bool]:
    """(the chosen setting, whether it keeps specificity in every mode): see the module docstring."""
    modes = [m for m in ("single", "sequence") if m in rows[0]]
    ok = [i for i, r in enumerate(rows) if all(keeps(r[m]) for m in modes)]
    if ok:
        return max(ok, key=lambda i: sum(rows[i][m]["efficacy"]["mean"] for m in modes)), True
    both = lambda i: sum(rows[i][m]["efficacy"]["mean"] + rows[i][m]["specificity"]["mean"] for m in modes)  # noqa
    return max(range(len(rows)), key=both), False


def cell(c) -> str:
    if c is None or c.get("mean") is None:
        return "-"
    return f"{c['mean']:.0f}" + (f" +-{c['ci95']:.0f}" if c.get("ci95") is not None else "")


def table(rows: list[dict], chosen: int) -> str:
    modes = [m for m in ("single", "sequence") if m in rows[0]]
    head = ["setting"] + [f"{m} {k}" for m in modes for k in ("eff", "gen", "spec", "change", "kept correct")]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for i, r in enumerate(rows):
        cells = [("**" if i == chosen else "") + r["label"] + ("**" if i == chosen else "")]
        for m in modes:
            x = r[m]
            cells += [cell(x["efficacy"]), cell(x["generalization"]), cell(x["specificity"]),
                      cell(x["change_specificity"]) + (" (kept)" if keeps(x) else ""), cell(x["kept_correct"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def points(lm, args, rows: list[dict]) -> dict:
    """The sweep as a shipped operating-points file (evaluation/points.ShippedPoints, assets/results/points/):
    per setting its layers, lr and ridge, and each mode's rates rounded as the manual prints them."""
    def mode(x: dict | None, ppl: bool) -> dict | None:
        if x is None:
            return None
        c = x["change_specificity"]
        out = {k: round(x[k]["mean"]) for k in ("efficacy", "generalization", "specificity")}
        out.update(change=round(c["mean"]), change_ci=round(c["ci95"] or 0), keeps=keeps(x),
                   kept_correct=round(x["kept_correct"]["mean"]))
        return {**out, "perplexity": round(x["perplexity_ratio"], 2)} if ppl else out

    first = rows[0].get("single") or rows[0]["sequence"]
    unedited = {"single": {k: round(first[f"unedited_{k}"]["mean"])
                           for k in ("efficacy", "generalization", "specificity")}, "sequence": {"perplexity": 1.0}}
    out = []
    for r in rows:
        hp = load_hparams("ultraedit", lm, r["setting"])
        out.append({"setting": {"layers": list(hp.layers), "lr": hp.lr, "ridge": hp.ridge},
                    "single": mode(r.get("single"), False), "sequence": mode(r.get("sequence"), True)})
    return {"method": "ultraedit", "model": lm.name, "set": args.set, "n": args.n, "knob": "lr",
            "columns": ["layers", "lr", "ridge"], "unedited": unedited, "rows": out,
            "command": "PYTHONPATH=$PWD OMP_NUM_THREADS=1 python " + " ".join(sys.argv),
            "source": f"benchmarks/ultraedit_pareto.py on {args.set} records 0-{args.n - 1}"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--set", default="counterfact-val")
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--grid", action="append", required=True)
    p.add_argument("--modes", default="single,sequence")
    p.add_argument("--ppl-tokens", type=int, default=512)
    p.add_argument("--json", default=None)
    p.add_argument("--points", default=None, help="also write the operating-points file the app and the manual "
                                                   "show (assets/results/points/ultraedit-<model>.json)")
    args = p.parse_args()
    lm = load_model(args.model)
    records = load_eval_set(args.set, args.n)
    before = base_rates(lm, records)
    rows = []
    for s in settings_of(args.grid):
        row = {"label": label(s), "setting": s}
        if "single" in args.modes:
            row["single"] = single(lm, s, records, before)
        if "sequence" in args.modes:
            row["sequence"] = sequence(lm, s, records, before, args.ppl_tokens)
        rows.append(row)
        print(json.dumps(row, default=float), flush=True)
    chosen, kept_all = choose(rows)
    print(table(rows, chosen))
    print("chosen:", rows[chosen]["label"], "(keeps specificity in every mode)" if kept_all else
          "(none keeps specificity in every mode: the highest efficacy + specificity)")
    if args.points:
        Path(args.points).write_text(json.dumps(points(lm, args, rows), indent=1, ensure_ascii=False) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": lm.name, "set": args.set, "n": args.n, "rows": rows,
                                               "chosen": chosen, "chosen_keeps": kept_all}, indent=1, default=float))


if __name__ == "__main__":
    main()
