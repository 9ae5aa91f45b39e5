"""`python -m editkit similarity --model M [--facts known|all] [--n 200] [--mode residual|raw] [--k 50] --json`:
PMET's MHSA vs FFN similarity curves (Li et al. 2023, Fig. 2): per layer, the cosine similarity and the top-k
logit-lens Jaccard similarity between each component's input and output state at the last token, mean and 95%
band over the facts. Same library function and disk cache as the "Attention vs FFN" page; `--ray` computes the
batches of prompts in parallel on a Ray cluster."""
import sys

from .common import add_model_and_ray, backend_and_model

# similarity.FACT_SETS, MODES, DEFAULT_N and TOP_K, named here so that --help imports no torch (a test compares)
FACT_SETS, MODES, DEFAULT_N, TOP_K = ("known", "all"), ("residual", "raw"), 200, 50


def register(sub):
    p = sub.add_parser("similarity", help="MHSA vs FFN input/output similarity per layer (PMET Fig. 2)")
    p.add_argument("--facts", choices=FACT_SETS, default="known",
                   help="known = ROME facts the model predicts (default); all = all ROME known facts")
    p.add_argument("--n", type=int, default=DEFAULT_N, help=f"number of facts ({DEFAULT_N})")
    p.add_argument("--prompt", action="append", dest="prompts",
                   help="use these prompts instead of a fact set (repeatable)")
    p.add_argument("--mode", choices=MODES, default="residual",
                   help="residual = states entering/leaving each component (default); raw = input vs the "
                        "component's own output vector, cos(x, f(x))")
    p.add_argument("--k", type=int, default=TOP_K, help=f"top-k tokens for the Jaccard similarity ({TOP_K})")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--no-cache", action="store_true", help="recompute even if a cached result exists")
    add_model_and_ray(p, run, show)


def run(args):
    from ..similarity import similarity

    backend, lm = backend_and_model(args)
    result = similarity(lm, n=args.n, facts=args.facts, prompts=args.prompts, mode=args.mode, k=args.k,
                        batch_size=args.batch_size, cache=not args.no_cache,
                        progress=lambda f, msg: print(f"[editkit] similarity {f:.0%} {msg}", file=sys.stderr),
                        backend=backend)
    return result


def show(result):
    r = result.to_json()  # the same numbers as --json, read by name
    timing = "cached" if r["cached"] else f"{r['seconds']} s"
    blocks = "parallel" if r["parallel"] else "sequential"
    print(f"{r['model']} ({r['family']}, {blocks} blocks), {r['n']} prompts ({r['facts']}), mode {r['mode']}, "
          f"top-{r['k']} Jaccard, {timing}")
    print(f"definition: {r['definition']}")
    print(f"band: {r['interval']}")
    print(f"{'layer':>5}  {'MHSA cos':>20}  {'FFN cos':>20}  {'MHSA Jaccard':>20}  {'FFN Jaccard':>20}")

    def cell(m, l):
        return f"{m['mean'][l]:.3f} [{m['low'][l]:.3f},{m['high'][l]:.3f}]"

    for l in r["layers"]:
        print(f"{l:>5}  {cell(r['mhsa_cos'], l):>20}  {cell(r['ffn_cos'], l):>20}  "
              f"{cell(r['mhsa_jaccard'], l):>20}  {cell(r['ffn_jaccard'], l):>20}")
