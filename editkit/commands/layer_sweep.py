"""`python -m editkit layer-sweep (--requests FILE | --set S --record I) [--layers 0-17] [--trace-kind mlp] --json`:
a one-layer method (ROME by default) at every layer for one request, beside the request's causal trace (Hase et al.
2023); `--ray` runs the layers (and the trace) in parallel on a Ray cluster."""
import sys

from ..core.errors import EditkitError
from .common import add_model_and_ray, load, ray_backend


def register(sub):
    p = sub.add_parser("layer-sweep", help="edit one request at each layer and compare with its causal trace")
    p.add_argument("--method", default="rome", help="a one-layer method (default rome)")
    p.add_argument("--requests", default=None, help="JSON file with one request (editkit, CounterFact, EasyEdit)")
    p.add_argument("--set", dest="set_name", default="counterfact", help="or a record of this set (with --record)")
    p.add_argument("--record", type=int, default=None, help="index of the record in --set")
    p.add_argument("--layers", default="all", help="'all', '2,4,6' or '0-17'")
    p.add_argument("--trace-kind", default="mlp", choices=["hidden", "mlp", "attn", "none"],
                   help="causal trace to compare with (none = skip)")
    p.add_argument("--samples", type=int, default=10, help="noise samples of the trace")
    p.add_argument("--hparams", default=None, help="JSON file of hyperparameter overrides (layers is swept)")
    add_model_and_ray(p, run, show)


def run(args):
    from ..editing.defaults import load_hparams_file
    from ..editing.methods import get
    from ..evaluation.layer_sweep import layer_sweep
    from .bleed import _request

    get(args.method)
    if args.samples < 1:
        raise EditkitError("--samples must be at least 1")
    request = _request(args)
    overrides = load_hparams_file(args.hparams) if args.hparams else None
    backend = ray_backend(args)
    lm = load(args)
    kind = None if args.trace_kind == "none" else args.trace_kind
    return layer_sweep(lm, request, args.layers, args.method, overrides, kind, args.samples,
                       progress=lambda f, m: print(f"[{100 * f:5.1f}%] {m}", file=sys.stderr, flush=True),
                       backend=backend)


def _f(x):
    return "    -" if x is None else f"{x:+.3f}"


def show(out):
    print(f"{out.method} at each layer on {out.model}: {out.request.rewrite} -> {out.request.target_new!r} "
          f"(default layer {out.default_layers})")
    t = out.trace
    head = f"{'layer':>5s} {'eff.magn':>9s} {'gen.magn':>9s} {'spec.magn':>9s} {'rewrite':>8s}"
    print(head + (f" {'trace p':>8s}" if t else ""))
    for r in out.rows:
        line = (f"{r.layer:5d} {_f(r.efficacy_magnitude):>9s} {_f(r.generalization_magnitude):>9s} "
                f"{_f(r.specificity_magnitude):>9s} {r.rewrite_score:8.3f}")
        if t:
            line += f" {t.scores[r.layer]:8.3f}" + ("  <- trace peak" if r.layer == t.peak_layer else "")
        print(line)
    print(f"best layer by the summed magnitudes: {out.best_layer}"
          + (f"; the {t.kind} trace at {t.token!r} peaks at layer {t.peak_layer}" if t else ""))
