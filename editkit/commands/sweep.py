"""`python -m editkit sweep --method M --param name=v1,v2 [--param ...] --set S --n N --json`: a method's rates at
every combination of hyperparameter values; resumable, each finished setting cached (evaluation/sweep.py); `--ray`
spreads the settings' batches of records over a Ray cluster."""
import sys

from ..core.errors import EditkitError
from .common import add_model_and_ray, load, ray_backend


def register(sub):
    from ..editing.methods import builtin_names as names

    p = sub.add_parser("sweep", help="efficacy / generalization / specificity of a method per hyperparameter "
                                     "setting, with the Pareto front")
    p.add_argument("--method", required=True, help=f"one of {', '.join(names())}")
    p.add_argument("--param", action="append", default=[], metavar="NAME=V1,V2",
                   help="values of one hyperparameter (repeat for a grid); layers=3,4 means [3] and [4], "
                        "layers=[2,3],[3,4] gives windows")
    p.add_argument("--set", dest="set_name", default="counterfact-val",
                   help="shipped set or a .json/.jsonl file of records (choose settings on a validation set)")
    p.add_argument("--n", type=int, default=50, help="records per setting (the first N of the set)")
    p.add_argument("--batch", type=int, default=None, help="requests per edit (default: 1 for ROME, 10 otherwise)")
    p.add_argument("--gen-prompts", type=int, default=0, help="sampled generations per record (fluency)")
    p.add_argument("--greedy-tokens", type=int, default=12,
                   help="greedy tokens for the generation-based efficacy (0 = off)")
    p.add_argument("--no-reuse", action="store_true", help="optimize the targets afresh for every setting")
    p.add_argument("--out", default=None, help="per-record results folder (default: the editkit cache)")
    add_model_and_ray(p, run, show)


def run(args):
    from dataclasses import replace

    from ..editing.methods import get
    from ..evaluation.datasets import load_eval_set
    from ..evaluation.sweep import SWEEP, parse_params, sweep

    get(args.method)
    params = parse_params(args.param)
    if args.n < 1 or (args.batch is not None and args.batch < 1) or args.gen_prompts < 0 or args.greedy_tokens < 0:
        raise EditkitError("--n and --batch must be at least 1, --gen-prompts and --greedy-tokens at least 0")
    load_eval_set(args.set_name, 1)  # a bad set or file fails before the model loads
    backend = ray_backend(args)
    lm = load(args)

    def progress(f, msg):
        print(f"[{100 * f:5.1f}%] {msg}", file=sys.stderr, flush=True)

    spec = replace(SWEEP, set_name=args.set_name, n=args.n, batch=args.batch, n_gen=args.gen_prompts,
                   greedy_tokens=args.greedy_tokens)
    return sweep(lm, args.method, params, spec, out_dir=args.out, reuse=not args.no_reuse, progress=progress,
                 backend=backend)


def _c(cell):
    if isinstance(cell, dict):
        cell = cell.get("mean")
    return "    -" if cell is None else f"{cell:5.1f}"


def show(out):
    print(f"{out.method} on {out.model}, {out.set} (first {out.n} records, batch {out.batch}); "
          "rates x100, * = Pareto-optimal (efficacy, generalization, specificity)")
    head = ["eff", "gen", "spec", "score", "g-eff", "g-gen"]
    print("   " + "".join(f"{h:>7s}" for h in head) + "   setting")
    u = out.unedited or {}
    print("   " + "".join(f"{_c(u.get(k)):>7s}" for k in ("efficacy", "generalization", "specificity", "score",
                                                          "gen_efficacy", "gen_generalization")) + "   (unedited)")
    for r in out.settings:
        cells = [r["efficacy"], r["generalization"], r["specificity"], r["score"], r["gen_efficacy"],
                 r["gen_generalization"]]
        flag = "*" if r["pareto"] else " "
        print(f" {flag} " + "".join(f"{_c(c):>7s}" for c in cells) + f"   {r['label']}"
              + ("  (cached)" if r.get("cached") else ""))
    if out.reused_targets:
        t = out.reused_targets
        print(f"target optimisations: {t['misses']} computed, {t['hits']} reused")
