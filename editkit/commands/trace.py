"""`python -m editkit trace --prompt P --subject S [--kind hidden|mlp|attn|all] ... --json`: causal tracing."""
from .common import add_model_arg, load


def register(sub):
    p = sub.add_parser("trace", help="causal tracing (ROME): restore states in a corrupted run")
    p.add_argument("--prompt", required=True)
    p.add_argument("--subject", required=True)
    p.add_argument("--target", default=None, help="answer token (default: the clean top-1)")
    p.add_argument("--kind", default="all", choices=["hidden", "mlp", "attn", "all"])
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--noise", default="3s", help="'3s' = 3 x embedding std (default), or an absolute value")
    p.add_argument("--uniform", action="store_true", help="uniform instead of Gaussian noise")
    p.add_argument("--replace", action="store_true", help="replace the subject embeddings by the noise")
    p.add_argument("--window", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--engine", default="fast", choices=["fast", "reference"])
    p.add_argument("--sever", action="store_true", help="also run the severing experiment")
    p.add_argument("--preview", action="store_true",
                   help="also give the attribution-patching estimate of each heatmap (the page's preview)")
    p.add_argument("--no-cache", action="store_true", help="recompute instead of using the shared result cache")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    from ..tracing import Tracer, TraceSpec, parse_noise
    from ..tracing.attribution import spearman

    lm = load(args)
    noise = parse_noise(args.noise, uniform=args.uniform, replace=args.replace)
    spec = TraceSpec(args.prompt, args.subject, args.target, args.samples, noise, args.window, args.seed,
                     kinds=args.kind)
    tracer = Tracer(lm, spec, cache=not args.no_cache)
    results = tracer.results(engine=args.engine, together=True)
    first = next(iter(results.values()))
    out = {
        "model": lm.name, "prompt": args.prompt, "subject": args.subject,
        "tokens": first.tokens, "subject_range": list(first.subject_range), "answer": first.answer,
        "high_score": first.high_score, "low_score": first.low_score, "noise_scale": first.noise_scale,
        "samples": args.samples, "seed": args.seed,
        "kinds": {k: {"kind": k, "window": r.window, "scores": r.scores, "indirect_effect": r.indirect_effect,
                      "reading": r.reading(), "seconds": round(r.seconds, 3),
                      "cached": bool(r.meta.get("cached"))} for k, r in results.items()},
    }
    if len(results) == 1:  # the flat form the issue names: kind, window, scores at the top level
        out.update({k: v for k, v in out["kinds"][first.kind].items()})
    if args.sever:
        out["severing"] = tracer.severing().to_json()
    if args.preview:
        preview = tracer.preview(list(results))
        out["preview"] = {k: {"scores": p.scores, "seconds": round(p.seconds, 3),
                              "spearman_vs_exact": spearman(p.scores, results[k].scores)}
                          for k, p in preview.items()}
    return out


def show(out):
    print(f"answer {out['answer']!r}: clean p = {out['high_score']:.3f}, corrupted p = {out['low_score']:.3f}")
    for kind, r in out["kinds"].items():
        print(f"[{kind}] {r['reading']}" + (" (cached)" if r.get("cached") else f" ({r['seconds']:.1f} s)"))
        width = max(len(repr(t)) for t in out["tokens"])
        b, e = out["subject_range"]
        for t, (tok, row) in enumerate(zip(out["tokens"], r["scores"])):
            mark = "*" if b <= t < e else " "
            print(f"  {repr(tok):>{width}}{mark} " + " ".join(f"{s:4.2f}" for s in row))
    for kind, p in out.get("preview", {}).items():
        print(f"[{kind} preview] attribution patching, Spearman vs exact {p['spearman_vs_exact']:.2f}")
    if "severing" in out:
        s = out["severing"]
        print(f"severing at {s['token_str']!r}: layer  none  mlp-severed  attn-severed")
        for l in s["layers"]:
            print(f"  {l:3d}  {s['none'][l]:.3f}  {s['mlp'][l]:.3f}  {s['attn'][l]:.3f}")
