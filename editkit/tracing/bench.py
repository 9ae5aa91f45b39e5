"""Causal tracing: the fast engine against the reference algorithm, same noise, on the embedded model."""
import time

from ..models import load_model


def add_args(p):
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--prompt", default="The Space Needle is in downtown")
    p.add_argument("--subject", default="Space Needle")
    p.add_argument("--kinds", default="hidden,mlp,attn")
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--last-only-reference", action="store_true",
                   help="also time the reference with logits at the last position only (a cheaper baseline)")


def run(args):
    from . import fast_trace, prepare, reference_trace

    lm = load_model(args.model)
    t0 = time.perf_counter()
    setup = prepare(lm, args.prompt, args.subject, samples=args.samples)
    setup_s = time.perf_counter() - t0
    rows = []
    for kind in args.kinds.split(","):
        t0 = time.perf_counter()
        fast = fast_trace(lm, setup, kind)
        fast_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ref = reference_trace(lm, setup, kind)
        ref_s = time.perf_counter() - t0
        row = {"kind": kind, "reference_s": round(ref_s, 2), "fast_s": round(fast_s + setup_s, 2),
               "ratio": round(ref_s / (fast_s + setup_s), 2), "max_abs_diff": float((fast - ref).abs().max())}
        print(f"{kind:6s} reference {ref_s:7.1f} s   fast {fast_s + setup_s:6.1f} s (incl. {setup_s:.1f} s shared "
              f"clean+corrupted runs)   ratio {ref_s / (fast_s + setup_s):5.1f}x   max |diff| "
              f"{row['max_abs_diff']:.2e}", flush=True)
        if args.last_only_reference:
            t0 = time.perf_counter()
            last = reference_trace(lm, setup, kind, last_only=True)
            last_s = time.perf_counter() - t0
            row.update(reference_last_only_s=round(last_s, 2), ratio_last_only=round(last_s / (fast_s + setup_s), 2),
                       max_abs_diff_last_only=float((fast - last).abs().max()))
            print(f"{kind:6s} reference, last-position logits only {last_s:7.1f} s   ratio "
                  f"{row['ratio_last_only']:5.1f}x   max |diff| {row['max_abs_diff_last_only']:.2e}", flush=True)
        rows.append(row)
    return {"model": lm.name, "prompt": args.prompt, "subject": args.subject, "samples": args.samples,
            "tokens": len(setup.tokens), "layers": lm.adapter.n_layers, "results": rows}
