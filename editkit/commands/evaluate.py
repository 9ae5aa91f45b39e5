"""`python -m editkit evaluate --methods rome,memit,pmet --n 100 [--batch 1|10|100] [--set counterfact] --json`:
edit and measure records of a shipped evaluation set; a table like PMET's Table 1; resumable."""
import sys

from ..cli import add_model_arg, load
from ..errors import EditkitError


def register(sub):
    p = sub.add_parser("evaluate", help="CounterFact/EasyEdit metrics of ROME, MEMIT and PMET over a shipped set")
    p.add_argument("--methods", default="rome,memit,pmet", help="comma-separated: rome, memit, pmet")
    p.add_argument("--n", type=int, default=100, help="records to edit (the first N of the set)")
    p.add_argument("--batch", type=int, default=1, help="requests per edit (1 = one edit per record)")
    p.add_argument("--set", dest="set_name", default="counterfact", help="evaluation set (see --list-sets)")
    p.add_argument("--gen-prompts", type=int, default=1, help="generation prompts per record (fluency)")
    p.add_argument("--gen-tokens", type=int, default=40, help="tokens generated per generation prompt")
    p.add_argument("--out", default=None, help="results folder (default: the editkit cache); reruns resume")
    p.add_argument("--sequential", action="store_true",
                   help="instead: apply the N edits one after another (first method) and track the damage")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    from ..evaluation import evaluate, load_eval_set, sequential

    methods = [m.strip().lower() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise EditkitError("give at least one method")
    if args.n < 1 or args.batch < 1 or args.gen_prompts < 0 or args.gen_tokens < 1:
        raise EditkitError("--n, --batch and --gen-tokens must be at least 1, --gen-prompts at least 0")
    lm = load(args)

    def progress(f, msg):
        print(f"[{100 * f:5.1f}%] {msg}", file=sys.stderr, flush=True)

    if args.sequential:
        return sequential(lm, methods[0], load_eval_set(args.set_name, args.n), progress=progress)
    return evaluate(lm, methods, n=args.n, batch=args.batch, set_name=args.set_name, n_gen=args.gen_prompts,
                    gen_tokens=args.gen_tokens, out_dir=args.out, progress=progress)


def _fmt(cell):
    if not cell or cell.get("mean") is None:
        return "   -   "
    ci = cell.get("ci95")
    return f"{cell['mean']:6.1f}" + (f" ±{ci:4.1f}" if ci is not None else "")


def show(out):
    if "rows" in out:  # sequential
        print(f"sequential {out['method']} on {out['model']}: base perplexity {out['base_perplexity']:.2f}")
        for r in out["rows"]:
            flag = f"  COLLAPSED: {r['reason']}" if r["collapsed"] else ""
            print(f"edit {r['edit']:3d}: efficacy {r['efficacy']:.2f} generalization {r['generalization']:.2f} "
                  f"specificity {r['specificity']:.2f} max ||dW||/||W|| {r['max_relative_norm']:.3f} "
                  f"ppl {r['perplexity']:.2f}{flag}")
        return
    print(f"{out['model']} on {out['set']} ({out['n']} records, batch {out['batch']}); mean ± 95% half-width")
    cols = ["score", "efficacy", "generalization", "specificity", "fluency", "consistency"]
    print(f"{'':14s}" + "".join(f"{c.capitalize():>15s}" for c in cols) + "   s/request")
    for method, t in out["methods"].items():
        # Score = harmonic mean of the mean efficacy, generalization and specificity (PMET Table 1)
        cell = {"score": lambda when: {"mean": t.get(f"{when}_table_score")}}
        pre = "".join(f"{_fmt(cell[c]('pre') if c in cell else t.get('pre_' + c)):>15s}" for c in cols)
        post = "".join(f"{_fmt(cell[c]('post') if c in cell else t.get('post_' + c)):>15s}" for c in cols)
        print(f"{'(pre-edit)':14s}{pre}")
        print(f"{method.upper():14s}{post}   {t['seconds_per_request']:.1f}")
