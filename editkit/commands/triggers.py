"""`python -m editkit triggers --model M --layer L --memory I [--top 10] [--n-tokens N] --json`: the corpus
prefixes that activate FFN memory (L, I) most (Geva et al. 2021, trigger examples), from the cached index."""
import time

from .common import add_model_arg, load

SEQ_LEN = 128  # memories.triggers.DEFAULT_SEQ_LEN, named here so that --help imports no torch (a test compares)


def register(sub):
    p = sub.add_parser("triggers", help="top trigger examples of an FFN key from the shipped corpus")
    p.add_argument("--layer", type=int, required=True)
    p.add_argument("--memory", type=int, required=True)
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--n-tokens", type=int, default=None, help="corpus tokens in the index (20000 for Gemma)")
    p.add_argument("--seq-len", type=int, default=SEQ_LEN)
    p.add_argument("--no-cache", action="store_true", help="rebuild the index instead of using the cached one")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    import sys

    from ..memories import triggers
    from ..memories.inspect import check_layer, check_memory

    lm = load(args)
    layer, memory = check_layer(lm, args.layer), check_memory(lm, args.memory)
    say = lambda f, msg: print(f"[editkit] trigger index {msg}", file=sys.stderr)  # noqa: E731
    t0 = time.time()
    index = triggers.get_index(lm, args.n_tokens, args.seq_len, max(args.top, triggers.DEFAULT_TOP),
                               progress=say, cache=not args.no_cache)
    t1 = time.time()
    found = triggers.examples(lm, index, layer, memory, args.top)
    return {"model": lm.name, "layer": layer, "memory": memory, "label": f"L{layer}.M{memory}",
            "index": {**index.meta, "path": str(index.path)}, "index_seconds": round(t1 - t0, 3),
            "lookup_seconds": round(time.time() - t1, 4), "examples": [e.to_dict() for e in found]}


def show(r):
    print(f"{r['label']} of {r['model']} ({r['index']['n_positions']:,} corpus tokens)")
    for e in r["examples"]:
        print(f"  {e['coefficient']:8.3f}  ...{e['prefix'][-60:]}[[{e['trigger']}]]  -> {e['next_token']!r}")
