"""`python -m editkit predict --model M "prompt" [--top 5] [--json]`: next-token top-k.

A converted model the light forward computes (model/quick.py) answers without loading torch or transformers;
any other loads the model. Both give the same predictions (tests/test_quick.py)."""
import sys

from .common import add_model_arg, load


def register(sub):
    p = sub.add_parser("predict", help="top next tokens for a prompt")
    p.add_argument("prompt")
    p.add_argument("--top", type=int, default=5)
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    preds = None
    if args.dtype in (None, "float32"):
        from ..model.folders import checked_name
        from ..model.quick import quick_top_k

        preds = quick_top_k(args.model, args.prompt, args.top)
    if preds is not None:
        name = checked_name(args.model)
        print(f"[editkit] {name}: answered from its converted weights by the light forward (model/quick.py)",
              file=sys.stderr, flush=True)
    else:
        from ..model.text import top_k

        lm = load(args)
        preds, name = top_k(lm, args.prompt, args.top), lm.name
    return {"model": name, "prompt": args.prompt, "predictions": [p.to_dict() for p in preds]}


def show(result):
    for p in result["predictions"]:
        print(f"{p['prob']:.4f}  {p['token']!r}")
