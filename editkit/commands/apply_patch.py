"""`python -m editkit apply-patch --patch P [--prompt X ...] [--target T ...] [--top 5] --json`: load a saved edit
(`edit --save-patch P`: safetensors + JSON manifest) and show, for each prompt, the top next tokens and the
probability of each target before and after the edit. Without --prompt, the manifest's requests give the prompts
(rewrite, paraphrase and neighborhood) and targets (target_new, target_true). The loaded model is not changed."""
from ..core.errors import EditkitError
from .common import add_model_arg, load


def register(sub):
    p = sub.add_parser("apply-patch", help="load a saved patch and compare predictions before and after")
    p.add_argument("--patch", required=True, help="the patch file (<P>.safetensors with <P>.json beside it)")
    p.add_argument("--prompt", action="append", default=None, help="a prompt (repeatable)")
    p.add_argument("--target", action="append", default=None, help="a target continuation (repeatable)")
    p.add_argument("--top", type=int, default=5)
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def _prompts_and_targets(args, manifest) -> tuple[list[str], list[str]]:
    prompts, targets = list(args.prompt or []), list(args.target or [])
    for r in manifest.get("requests", []) if not prompts else []:
        prompts += [r["prompt"].replace("{}", r["subject"]), *r.get("paraphrase_prompts", []),
                    *r.get("neighborhood_prompts", [])]
        targets += [t for t in (r.get("target_new"), r.get("target_true")) if t and t not in targets]
    if not prompts:
        raise EditkitError("the patch's manifest has no requests: give --prompt (and --target)")
    return prompts, [t if t.startswith(" ") else " " + t for t in targets]


def _read(lm, prompts, targets, top):
    from ..model.scoring import score_targets
    from ..model.text import top_k

    rows = []
    for p in prompts:
        scores = score_targets(lm, [p] * len(targets), targets) if targets else []
        rows.append({"top": [t.to_dict() for t in top_k(lm, p, top)],
                     "targets": {t: s.prob for t, s in zip(targets, scores)}})
    return rows


def run(args):
    from ..model.weights import applied, load_patch

    if args.top < 1:
        raise EditkitError("--top must be at least 1")
    delta, manifest = load_patch(args.patch)
    prompts, targets = _prompts_and_targets(args, manifest)
    lm = load(args)
    before = _read(lm, prompts, targets, args.top)
    with applied(lm, delta):  # checks names, shapes and values against this model
        after = _read(lm, prompts, targets, args.top)
    return {"model": lm.name, "patch": str(args.patch), "manifest_model": manifest.get("model"),
            "method": manifest.get("method"), "parameters": {k: list(v.shape) for k, v in delta.items()},
            "prompts": [{"prompt": p, "before": b, "after": a} for p, b, a in zip(prompts, before, after)]}


def show(r):
    print(f"{r['method'] or 'patch'} ({r['patch']}) on {r['model']}" +
          (f" (made on {r['manifest_model']})" if r["manifest_model"] not in (None, r["model"]) else ""))
    for row in r["prompts"]:
        b, a = row["before"], row["after"]
        print(f"- {row['prompt']!r}: top {b['top'][0]['token']!r} -> {a['top'][0]['token']!r}")
        for t, p in b["targets"].items():
            print(f"    P({t!r}) {p:.4f} -> {a['targets'][t]:.4f}")
