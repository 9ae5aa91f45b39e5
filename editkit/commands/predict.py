"""`python -m editkit predict --model M "prompt" [--top 5] [--json]`: next-token top-k."""
from .common import add_model_arg, load


def register(sub):
    p = sub.add_parser("predict", help="top next tokens for a prompt")
    p.add_argument("prompt")
    p.add_argument("--top", type=int, default=5)
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    from ..model.text import top_k

    lm = load(args)
    preds = top_k(lm, args.prompt, args.top)
    return {"model": lm.name, "prompt": args.prompt, "predictions": [p.to_dict() for p in preds]}


def show(result):
    for p in result["predictions"]:
        print(f"{p['prob']:.4f}  {p['token']!r}")
