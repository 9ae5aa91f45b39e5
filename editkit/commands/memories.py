"""`python -m editkit memories --model M --prompt P --layer L [--position -1] [--top 10] [--norm] --json`:
the FFN memories most active at one position (Geva et al. 2021), their value tokens, and the residual's top
tokens before and after each FFN."""
from .common import add_model_arg, load


def register(sub):
    p = sub.add_parser("memories", help="FFN key-value memories at one token position")
    p.add_argument("--prompt", required=True)
    p.add_argument("--layer", type=int, required=True)
    p.add_argument("--position", type=int, default=-1, help="token index (-1 = last)")
    p.add_argument("--top", type=int, default=10, help="memories to show")
    p.add_argument("--tokens", type=int, default=5, help="top tokens per value / residual")
    p.add_argument("--norm", action="store_true", help="apply the final norm before projecting values")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    from ..memories.inspect import memories_at

    lm = load(args)
    view = memories_at(lm, args.prompt, args.layer, args.position, args.top, args.norm, args.tokens, args.tokens)
    return view


def show(r):
    print(f"{r.model}  layer {r.layer}  position {r.position} ({r.tokens[r.position]!r})  "
          f"{r.n_active} memories with m_i > 0")
    for m in r.memories:
        toks = " ".join(repr(t["token"]) for t in m.value_tokens)
        print(f"  {m.label:>10}  m={m.coefficient:+.3f}  |m|·||v||={m.contribution:.3f}  {toks}")
    print(f"residual top token before -> after FFN ({r.definition}):")
    for row in r.lens:
        print(f"  L{row.layer:<3} {row.before[0]['token']!r:>14} -> {row.after[0]['token']!r}")
