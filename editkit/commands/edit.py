"""`python -m editkit edit --method M --requests FILE [--hparams FILE] [--save-patch P] --json`: any registered
method (editing/methods/)."""
import time

from ..core.errors import EditkitError
from .common import add_model_arg, load


def register(sub):
    from ..editing.methods import all_methods

    methods = all_methods()
    p = sub.add_parser("edit", help=f"edit facts with {', '.join(m.label for m in methods)} and report pre/post "
                                    "probabilities")
    p.add_argument("--method", required=True, choices=[m.name for m in methods])
    p.add_argument("--requests", required=True, help="JSON/JSONL file: editkit, CounterFact or EasyEdit records")
    p.add_argument("--hparams", default=None, help="JSON file of hyperparameter overrides")
    p.add_argument("--save-patch", default=None, help="write the edit as <P>.safetensors + <P>.json")
    p.add_argument("--save-model", default=None, help="write the edited model with save_pretrained")
    p.add_argument("--n", type=int, default=None, help="use the first N requests of the file")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    from ..editing.api import run_edit
    from ..editing.defaults import load_hparams_file
    from ..editing.requests import parse_requests
    from ..evaluation.measure import measure, probabilities
    from ..model.weights import applied, save_patch

    requests = parse_requests(args.requests)
    if args.n is not None:
        if args.n < 1:
            raise EditkitError("--n must be at least 1")
        requests = requests[: args.n]
    overrides = load_hparams_file(args.hparams) if args.hparams else None
    lm = load(args)
    pre = [probabilities(measure(lm, r, n_gen=0)) for r in requests]
    result = run_edit(lm, args.method, requests, overrides)
    t0 = time.perf_counter()
    with applied(lm, result.delta):
        post = [probabilities(measure(lm, r, n_gen=0)) for r in requests]
    if args.save_model:
        state = dict(lm.model.state_dict())
        state.update({name: state[name] + d for name, d in result.delta.items()})
        lm.model.save_pretrained(args.save_model, state_dict=state)  # the loaded weights stay as they are
        lm.tok.save_pretrained(args.save_model)
    out = {"model": lm.name, "method": args.method, "seconds": round(result.seconds, 2),
           "eval_seconds": round(time.perf_counter() - t0, 2), "info": result.to_dict()["info"], "requests": []}
    out["hparams"] = out["info"].pop("hparams", None)
    for r, a, b in zip(requests, pre, post):
        out["requests"].append({"case_id": r.case_id, "rewrite": r.rewrite, "target_new": r.target_new,
                                "target_true": r.target_true, "pre": a, "post": b})
    if args.save_patch:
        path = save_patch(args.save_patch, result.delta, {"model": lm.name, "method": args.method,
                                                          "requests": [r.to_dict() for r in requests],
                                                          "hparams": out["hparams"]})
        out["patch"] = str(path)
    return out


def show(out):
    print(f"{out['method']} on {out['model']}: {out['seconds']} s")
    for r in out["requests"]:
        print(f"- {r['rewrite']!r}: {r['target_true']!r} -> {r['target_new']!r}")
        for group in ("rewrite", "paraphrase", "neighborhood"):
            for a, b in zip(r["pre"][group], r["post"][group]):
                true = f"  p_true {a.get('p_true', float('nan')):.3f} -> {b.get('p_true', float('nan')):.3f}"
                print(f"  [{group}] p_new {a['p_new']:.3f} -> {b['p_new']:.3f}{true}  {a['prompt'][:60]!r}")
