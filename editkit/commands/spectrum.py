"""`python -m editkit spectrum [--layers 2,3] [--rule energy] [--threshold 0.01] --json`: the eigenvalues of
C = E[k k^T] at AlphaEdit's edited layers, the null space its rule selects, and what upstream's absolute threshold
would select (editing/spectrum.py)."""
from ..core.errors import EditkitError
from .common import add_model_arg, load


def register(sub):
    p = sub.add_parser("spectrum", help="eigenvalues of the key statistics C per edited layer and AlphaEdit's null "
                                        "space")
    p.add_argument("--layers", default=None, help="comma-separated layers (default: AlphaEdit's for the model)")
    p.add_argument("--rule", default=None, help="null-space rule: energy, relative or absolute (default: hparams)")
    p.add_argument("--threshold", type=float, default=None, help="the rule's threshold (default: hparams)")
    p.add_argument("--eigenvalues", action="store_true", help="print every eigenvalue (always in --json)")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    from ..editing.spectrum import spectrum

    layers = None
    if args.layers:
        try:
            layers = [int(x) for x in args.layers.split(",") if x.strip()]
        except ValueError:
            raise EditkitError(f"--layers takes comma-separated integers, not {args.layers!r}") from None
    out = spectrum(load(args), layers, args.rule, args.threshold)
    out.extra["print_eigenvalues"] = args.eigenvalues
    return out


def show(out):
    print(f"{out.model}: null space = {out.rule_meaning} (threshold {out.threshold:g}); C from "
          f"{out.statistics_tokens:,} WikiText tokens")
    print(f"{'layer':>5s} {'width':>6s} {'largest':>10s} {'mean':>10s} {'null dim':>9s} {'cut':>10s} "
          f"{'null E||k||²':>13s} {'upstream dim':>13s} {'upstream E':>11s}")
    for r in out.layers:
        cut = f"{r.cut:.3g}" if r.cut is not None else "-"
        print(f"{r.layer:5d} {r.width:6d} {r.largest:10.3g} {r.mean:10.3g} {r.null_dimension:9d} "
              f"{cut:>10s} {100 * r.null_energy:12.2f}% {r.upstream_null_dimension:13d} "
              f"{100 * r.upstream_null_energy:10.2f}%")
        if out.extra.get("print_eigenvalues"):
            print("  " + " ".join(f"{v:.3g}" for v in r.eigenvalues))
    print(f"upstream: {out.upstream['meaning']}")
