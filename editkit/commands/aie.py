"""`python -m editkit aie [--n 100] [--json]`: the average indirect effect over facts the model knows (ROME Fig. 2),
traced by the exact engine through the shared result cache (a second run, or facts traced before, cost nothing);
`--ray` traces the facts in parallel on a Ray cluster."""
import sys

from .common import add_model_and_ray, backend_and_model


def register(sub):
    p = sub.add_parser("aie", help="average indirect effect of hidden/MLP/attention states over known facts")
    p.add_argument("--n", type=int, default=100, help="facts (the first N the model predicts)")
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--noise", default="3s")
    p.add_argument("--window", type=int, default=10)
    p.add_argument("--no-cache", action="store_true", help="recompute every fact instead of using the cache")
    add_model_and_ray(p, run, show)


def run(args):
    from ..tracing.aie import average_indirect_effect

    backend, lm = backend_and_model(args)
    stats: dict = {}
    say = lambda f, msg: print(f"[aie] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    out = average_indirect_effect(lm, args.n, args.samples, args.noise, args.window, progress=say,
                                  cache=not args.no_cache, stats=stats, backend=backend)
    out.seconds, out.cached_facts, out.facts = stats["seconds"], stats["cached_facts"], stats["facts"]
    return out


def show(out):
    print(f"{out.model}: {out.n_facts} facts in {out.seconds:.1f} s ({out.cached_facts} from the cache)")
    for kind, classes in out.kinds.items():
        print(f"[{kind}] peak mean IE per token class (layer)")
        for c, band in classes.items():
            layer, mean = out.peak(kind, c)
            print(f"  {c:>16}: {mean:+.3f} at layer {layer} (N = {band.n})")
