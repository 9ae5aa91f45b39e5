"""`python -m editkit models`: the embedded and tiny models."""
from ..models import list_models


def register(sub):
    p = sub.add_parser("models", help="list the embedded and tiny models")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=lambda args: list_models(), show=show)


def show(rows):
    for r in rows:
        print(f"{r['name']:16s} {r['kind']:9s} {r['about']}")
    print("Any Hugging Face hub id or local folder also works (e.g. gpt2-xl), when reachable.")
