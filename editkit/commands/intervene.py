"""`python -m editkit intervene --model M --prompt P --memory L3.M17 [--memory ...] [--mode off|on] [--position -1]
--json`: switch FFN memories off (m_i = 0) or on (m_i = the layer's largest coefficient) at one position and compare
the next-token prediction and a greedy continuation with the unchanged run (Geva et al. 2021)."""
from .common import add_model_arg, load

MODES = ("off", "on", "keep")  # memories.intervene.MODES, named here so that --help imports no torch (a test compares)


def register(sub):
    p = sub.add_parser("intervene", help="switch FFN memories on or off and compare predictions")
    p.add_argument("--prompt", required=True)
    p.add_argument("--memory", action="append", required=True, help="a memory like L3.M17 (repeatable)")
    p.add_argument("--mode", choices=MODES, default="off")
    p.add_argument("--position", type=int, default=-1, help="token index (-1 = last)")
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--tokens", type=int, default=10, help="tokens of greedy continuation")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    from ..memories.intervene import intervene, parse_memory

    memories = [parse_memory(m) for m in args.memory]
    lm = load(args)
    return {"model": lm.name, **intervene(lm, args.prompt, memories, args.mode, args.position, args.top,
                                          args.tokens).to_json()}  # the JSON edge, with the model's name


def show(r):
    print(f"{r['model']}: memories {', '.join(m['label'] for m in r['memories'])} switched {r['mode']} at position "
          f"{r['position']} ({r['token']!r})")
    for m in r["memories"]:
        print(f"  {m['label']}: m = {m['coefficient_before']} -> {m['coefficient_after']}")
    print("before: " + ", ".join(f"{t['token']!r} {t['prob']:.3f}" for t in r["before"][:5]))
    print("after:  " + ", ".join(f"{t['token']!r} {t['prob']:.3f}" for t in r["after"][:5]))
    print(f"continuation before: {r['continuation_before']!r}")
    print(f"continuation after:  {r['continuation_after']!r}")
