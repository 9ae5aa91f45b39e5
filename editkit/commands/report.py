"""`python -m editkit report --model M --requests R --methods a,b,... --out FILE.html`: every method edits the
same request(s) from the same weights, as Edit & compare does (evaluation/compare.py), and the comparison is
written as one self-contained HTML file (evaluation/html_report.py): the requests, the metrics with 95%
intervals, the probability bars, the weight change, the conclusion, versions and this very command. `--bleed
METHOD` adds the bleed map of the first request, `--ripple` its ripple effects (every compared method and the
in-context reference)."""
from ..core.errors import EditkitError
from .common import add_model_arg, load


def register(sub):
    p = sub.add_parser("report", help="compare methods on a request and write one self-contained HTML report")
    p.add_argument("--requests", required=True, help="JSON/JSONL file: editkit, CounterFact or EasyEdit records")
    p.add_argument("--methods", default=None, help="comma-separated methods (default: every registered one)")
    p.add_argument("--out", required=True, help="the HTML file to write (a new file, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace the --out file if it exists")
    p.add_argument("--n", type=int, default=None, help="use the first N requests of the file")
    p.add_argument("--n-gen", type=int, default=1, help="sampled generations per request (0: none)")
    p.add_argument("--gen-tokens", type=int, default=30, help="tokens per generation")
    p.add_argument("--hparams", default=None, help="JSON file {method: {hyperparameter overrides}}")
    p.add_argument("--bleed", default=None, metavar="METHOD", help="add this method's bleed map")
    p.add_argument("--bleed-facts", type=int, default=15, help="known facts of the relation in the bleed map")
    p.add_argument("--ripple", action="store_true", help="add the ripple effects of the first request")
    p.add_argument("--relation", default=None, help="the Wikidata relation of the edited fact (ripple, bleed)")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def _methods(text: str | None) -> list[str]:
    from ..editing.methods import all_methods, get

    names = [m.name for m in all_methods()] if not text else [m.strip() for m in text.split(",") if m.strip()]
    for name in names:
        get(name)  # an unknown method is named before the model loads
    return names


def run(args) -> dict:
    from ..core.paths import new_file
    from ..editing.defaults import load_hparams_file
    from ..evaluation.compare import compare_methods
    from ..evaluation.datasets import load_eval_set

    methods = _methods(args.methods)
    if args.n is not None and args.n < 1:
        raise EditkitError("--n must be at least 1")
    new_file(args.out, args.overwrite)  # before minutes of editing: a folder, a taken name, a read-only folder
    records = load_eval_set(args.requests, args.n)
    hparams = load_hparams_file(args.hparams) if args.hparams else None
    if args.bleed:
        _methods(args.bleed)
    lm = load(args)
    cmp = compare_methods(lm, methods, records, hparams, args.n_gen, args.gen_tokens, progress=_progress())
    bleed, ripple = _extras(lm, args, records[0], methods, hparams)
    path = cmp.report(args.out, bleed, ripple, command=_command(args, methods), overwrite=args.overwrite)
    return {"report": str(path), "bytes": path.stat().st_size, "model": lm.name, "methods": methods,
            "requests": len(records)}


def _extras(lm, args, record, methods: list[str], hparams: dict | None):
    """The bleed map and ripple effects of the first request, when asked for."""
    from ..evaluation.bleed import bleed_map
    from ..evaluation.ripple import ripple_view

    relation = args.relation or record.relation
    bleed = bleed_map(lm, args.bleed, record.request, (hparams or {}).get(args.bleed), relation,
                      args.bleed_facts) if args.bleed else None
    # no relation given: ripple reads it from the request's template, as the page does
    ripple = ripple_view(lm, record.request, methods, relation, hparams) if args.ripple else None
    return bleed, ripple


def _command(args, methods: list[str]) -> str:
    """This run as one command line, every setting written out (the defaults too), files as they were named."""
    from ..evaluation.html_report import command_line

    words = ["report", "--model", args.model, "--requests", args.requests, "--methods", ",".join(methods)]
    optional = [("--n", args.n), ("--dtype", args.dtype),
                ("--hparams", args.hparams), ("--bleed", args.bleed), ("--relation", args.relation)]
    words += ["--n-gen", str(args.n_gen), "--gen-tokens", str(args.gen_tokens)]
    words += [w for flag, value in optional if value is not None for w in (flag, str(value))]
    if args.bleed:
        words += ["--bleed-facts", str(args.bleed_facts)]
    words += ["--ripple"] * args.ripple + ["--trust-remote-code"] * args.trust_remote_code
    return command_line(words + ["--out", args.out])


def _progress():
    import sys

    return lambda fraction, message: print(f"[editkit] {100 * fraction:.0f}% {message}", file=sys.stderr,
                                           flush=True)


def show(r: dict) -> None:
    print(f"{r['report']}: {r['bytes'] / 1e6:.2f} MB, {len(r['methods'])} method(s) on {r['requests']} "
          f"request(s) of {r['model']}")
