"""`python -m editkit geva --model M [--positions N] [--memories N] [--top-memories 10] [--norm] --json`: Geva et al.
(2021)'s layer analyses (value/trigger agreement, Fig. 5; compositionality, Fig. 8; the layer at which the
prediction is fixed, Fig. 9), the same cached computation as the FFN memories page."""
import sys

from ..core.errors import EditkitError
from .common import add_model_arg, load


def register(sub):
    p = sub.add_parser("geva", help="Geva et al. layer analyses of the FFN memories (Fig. 5, 8, 9)")
    p.add_argument("--positions", type=int, default=None, help="corpus positions sampled (model-size default)")
    p.add_argument("--memories", type=int, default=None, help="memories per layer for Fig. 5 (model-size default)")
    p.add_argument("--top-memories", type=int, default=10, help="top memories per position for Fig. 8")
    p.add_argument("--norm", action="store_true", help="apply the final norm before projecting to the vocabulary")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-cache", action="store_true", help="recompute instead of using the cached result")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    from ..memories import geva

    for name in ("positions", "memories", "top_memories"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise EditkitError(f"--{name.replace('_', '-')} must be at least 1")
    lm = load(args)
    result = geva.analyses(lm, args.positions, args.memories, args.top_memories, args.norm, seed=args.seed,
                           cache=not args.no_cache,
                           progress=lambda f, msg: print(f"[editkit] geva {f:.0%} {msg}", file=sys.stderr))
    return result


def show(result):
    r = result.to_json()  # the same numbers as --json, read by name
    print(f"{r['model']}: {r['n_positions']} positions, {r['memories_per_layer']} memories per layer, "
          f"norm={r['norm']}")
    print(f"{'layer':>5} {'agreement':>10} {'median rank':>12} {'compositional':>14} {'fixed at':>9} {'fixed by':>9}")
    for l, values in enumerate(zip(r["agreement"], r["median_rank"], r["compositional"], r["fixed_at"],
                                   r["fixed_by"])):
        a, rank, comp, at, by = values
        print(f"{l:>5} {a:>10.3f} {rank:>12.0f} {comp:>14.3f} {at:>9.3f} {by:>9.3f}")
