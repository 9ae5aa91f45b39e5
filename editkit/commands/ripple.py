"""`python -m editkit ripple --model M --requests FILE [--methods rome,memit] [--relation P131] [--json]`: the facts
an edit should move (logical generalization, aliasing) and should leave (relation specificity, preservation),
derived from the model's own answers, before and after each method and the in-context reference."""
from ..core.errors import EditkitError
from .common import add_model_arg, load


def register(sub):
    from ..editing.methods import builtin_names as names

    p = sub.add_parser("ripple", help="what an edit should move beside what it must not (RippleEdits' criteria)")
    p.add_argument("--requests", required=True, help="JSON/JSONL file: editkit, CounterFact or EasyEdit records")
    p.add_argument("--methods", default="rome,memit", help=f"comma-separated: {', '.join(names())}")
    p.add_argument("--relation", default=None, help="the Wikidata relation of the requests (P17, P131, ...) when "
                                                    "the records do not carry it")
    p.add_argument("--no-reference", action="store_true", help="leave out the in-context reference")
    p.add_argument("--n", type=int, default=1, help="the first N requests of the file (each edited alone)")
    p.add_argument("--fact", action="append", default=[], metavar="PROMPT|ANSWER|move|stay",
                   help="an implied fact of your own (repeatable)")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def _user_facts(specs: list[str]):
    from ..data.implications import user_fact

    out = []
    for s in specs:
        parts = s.split("|")
        if len(parts) != 3 or parts[2].strip() not in ("move", "stay"):
            raise EditkitError(f"--fact {s!r}: write PROMPT|ANSWER|move or PROMPT|ANSWER|stay")
        out.append(user_fact(parts[0], parts[1], parts[2].strip() == "move"))
    return out


def run(args):
    import sys

    from ..data.implications import check_relation
    from ..editing.methods import get
    from ..editing.requests import parse_requests
    from ..evaluation.ripple import IN_CONTEXT, ripple

    requests = parse_requests(args.requests)
    if args.n < 1:
        raise EditkitError("--n must be at least 1")
    methods = [m.strip().lower() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m != IN_CONTEXT:
            get(m)  # an unknown method fails before the model loads
    extra = _user_facts(args.fact)
    if args.relation is not None:
        check_relation(args.relation)  # a relation typed wrong fails before the model loads
    lm = load(args)

    def progress(f, msg):
        print(f"[{100 * f:5.1f}%] {msg}", file=sys.stderr, flush=True)

    return {"model": lm.name, "edits": [ripple(lm, r, methods, args.relation, extra=extra,
                                               reference=not args.no_reference, progress=progress).to_json()
                                        for r in requests[:args.n]]}


def show(out):
    from ..data.implications import CRITERIA

    for e in out["edits"]:
        r = e["request"]
        print(f"{r['prompt'].replace('{}', r['subject'])} {(r['target_true'] or '?').strip()} -> "
              f"{r['target_new'].strip()}   [relation {e['relation'] or 'unknown'}] on {out['model']}")
        if not e["facts"]:
            print(f"  {e['message']}")
        names = list(e["methods"])
        if e["facts"]:
            print(f"  {'criterion':14s}{'should':7s}{'P before':>9s}  " + "".join(f"{n[:12]:>13s}" for n in names)
                  + "   prompt -> expected")
        for i, f in enumerate(e["facts"]):
            outcomes = [e["methods"][n]["outcomes"][i] for n in names]
            cells = "".join(f"{o['p_after']:7.3f} {_mark(o):5s}" for o in outcomes)
            print(f"  {f['criterion'][:13]:14s}{'move' if f['move'] else 'stay':7s}{f['p_before']:9.3f}  {cells}"
                  f"   {f['prompt']!r} -> {f['answer'].strip()!r}" + (f"  ({f['rule']})" if f['rule'] else ""))
        for m in e["methods"].values():
            eff = m["efficacy"][1] if m["efficacy"] else None
            spec = m["specificity"][1] if m["specificity"] else None
            print(f"  {m['label']}: efficacy {'-' if eff is None else f'{eff:.0%}'}, neighbourhood kept "
                  f"{'-' if spec is None else f'{spec:.0%}'}, {m['seconds']:.1f} s")
        print(f"  {len(e['dropped'])} candidate(s) dropped (--json lists each with its reason)")
        if e["facts"] and e["conclusion"]:  # with no fact the conclusion is the message, printed above
            print(f"  {e['conclusion']}")
    print("P = teacher-forced P(expected answer | prompt); ok = moved / stayed as it should (the expected answer is "
          "the model's top-1); criteria: " + "; ".join(f"{k} = {v}" for k, v in CRITERIA.items()))


def _mark(o):
    return "ok" if o["verdict"] != "failed" else "FAIL"
