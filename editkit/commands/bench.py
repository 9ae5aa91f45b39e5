"""`python -m editkit bench trace|edit [...] [--json]`: benchmarks that time editkit against the reference algorithm
in the same run. The measurements live in the library (tracing/bench.py, editing/bench.py); this file parses the
arguments and prints."""
import sys

from ..cli import add_model_arg, load


def register(sub):
    p = sub.add_parser("bench", help="benchmarks on the embedded model")
    inner = p.add_subparsers(dest="bench", required=True)
    t = inner.add_parser("trace", help="causal tracing: the fast engine against ROME's algorithm, same noise")
    t.add_argument("--prompt", default="The Space Needle is in downtown")
    t.add_argument("--subject", default="Space Needle")
    t.add_argument("--kinds", default="hidden,mlp,attn")
    t.add_argument("--samples", type=int, default=10)
    t.add_argument("--last-only-reference", action="store_true",
                   help="(always on now) also time the reference with logits at the last position only")
    t.add_argument("--no-reference", action="store_true", help="skip ROME's algorithm (engine and preview only)")
    t.add_argument("--facts", type=int, default=20,
                   help="known facts for the preview's rank correlation (0: only the prompt)")
    t.add_argument("--threads", type=int, default=None,
                   help="torch threads (default: torch's own); 1 gives steadier ratios on a busy machine")
    e = inner.add_parser("edit", help="editing: every method on one request and a batch, statistics cached")
    e.add_argument("--n", type=int, default=10, help="requests in the batch")
    e.add_argument("--methods", default=None, help="comma-separated methods (default: all registered)")
    e.add_argument("--no-reference", action="store_true",
                   help="skip the reference run (ROME with the full model at every optimisation step)")
    for q in (t, e):
        add_model_arg(q)
    t.set_defaults(func=run_trace, show=show)
    e.set_defaults(func=run_edit, show=show)


def _line(row: dict) -> str:
    return "  ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())


def _say(row: dict) -> None:
    print(_line(row), file=sys.stderr, flush=True)


def show(out: dict) -> None:
    print("  ".join(f"{k} {v}" for k, v in out.items() if not isinstance(v, (list, dict))))
    for k, v in out.items():
        if isinstance(v, dict):
            print(f"{k}: {v}")
    for row in out["results"]:
        print(_line(row))


def run_trace(args):
    import torch

    from ..tracing.bench import bench_trace

    if args.threads is not None:
        torch.set_num_threads(max(1, args.threads))
    return bench_trace(load(args), args.prompt, args.subject, args.kinds.split(","), args.samples,
                       reference=not args.no_reference, facts=max(0, args.facts), say=_say)


def run_edit(args):
    from ..editing.bench import bench_edit

    methods = [m.strip() for m in args.methods.split(",")] if args.methods else None
    return bench_edit(load(args), args.n, not args.no_reference, methods, say=_say)
