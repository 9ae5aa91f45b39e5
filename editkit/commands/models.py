"""`python -m editkit models [--estimate] [--dtype D]`: the real models shipped on PyPI and the tiny test models."""
from .common import DTYPES


def register(sub):
    p = sub.add_parser("models", help="list the shipped real models and the tiny test models")
    p.add_argument("--estimate", action="store_true",
                   help="add each model's memory estimate (parameters x bytes, from its config) for --dtype")
    p.add_argument("--dtype", default="float32", choices=DTYPES)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run, show=show)


def run(args):
    from ..model.loading import estimate, list_models

    rows = list_models()
    if args.estimate:
        for r in rows:
            guess = estimate(r["name"], args.dtype)
            r["estimate"] = guess["text"] if guess else None
    return rows


def show(rows):
    for r in rows:
        state = {True: "converted", False: "not fetched yet"}.get(r.get("cached"), "")
        print(f"{r['name']:16s} {r['kind']:9s} {r['about']}" + (f" [{state}]" if state else ""))
        if r.get("estimate"):
            print(f"{'':27s}{r['estimate']}")
    print("Any Hugging Face hub id or local folder also works (e.g. gpt2-xl), when reachable. "
          "--dtype bfloat16 on any command halves the weights' memory.")
