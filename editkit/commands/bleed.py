"""`python -m editkit bleed --method rome (--requests FILE | --set S --record I) [--facts N] --json`: which other
facts one edit moved, against what the method predicts from its update (ROME Eq. 2: Delta W k = Lambda (C^-1 k*)^T k;
evaluation/bleed.py)."""
import json
import sys

from ..core.errors import EditkitError
from .common import add_model_arg, load


def register(sub):
    from ..editing.methods import builtin_names as names

    p = sub.add_parser("bleed", help="bleed map of one edit: rise of P(new) on neighbours vs the update's share")
    p.add_argument("--method", default="rome", help=f"one of {', '.join(names())}")
    p.add_argument("--requests", default=None, help="JSON file with one request (editkit, CounterFact, EasyEdit)")
    p.add_argument("--set", dest="set_name", default="counterfact", help="or a record of this set (with --record)")
    p.add_argument("--record", type=int, default=None, help="index of the record in --set")
    p.add_argument("--facts", type=int, default=20, help="known facts of the same relation to add (0 = none)")
    p.add_argument("--relation", default=None, help="Wikidata relation id (default: found from the prompt)")
    p.add_argument("--prompt", action="append", default=[], help="another prompt to measure (repeatable)")
    p.add_argument("--hparams", default=None, help="JSON file of hyperparameter overrides")
    p.add_argument("--hparams-json", default=None, help="hyperparameter overrides as a JSON string")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def _record(args):
    """(request, relation or None) from --requests or --set/--record."""
    from ..editing.requests import parse_requests
    from ..evaluation.datasets import load_eval_set

    if args.requests:
        reqs = parse_requests(args.requests)
        if len(reqs) != 1:
            raise EditkitError(f"{args.requests} holds {len(reqs)} requests; a bleed map is for one")
        return reqs[0], None
    if args.record is None:
        raise EditkitError("give --requests FILE or --record I (of --set)")
    if args.record < 0:
        raise EditkitError("--record must be at least 0")
    records = load_eval_set(args.set_name, args.record + 1)
    if len(records) <= args.record:
        raise EditkitError(f"{args.set_name} has only {len(records)} records")
    return records[args.record].request, records[args.record].relation


def _request(args):
    return _record(args)[0]


def run(args):
    from ..editing.defaults import load_hparams_file
    from ..editing.methods import get
    from ..evaluation.bleed import bleed_map

    get(args.method)
    if args.facts < 0:
        raise EditkitError("--facts must be at least 0")
    request, relation = _record(args)
    overrides = load_hparams_file(args.hparams) if args.hparams else {}
    if args.hparams_json:
        try:
            extra = json.loads(args.hparams_json)
        except ValueError as exc:
            raise EditkitError(f"--hparams-json is not valid JSON: {exc}") from None
        if not isinstance(extra, dict):
            raise EditkitError("--hparams-json must be a JSON object")
        overrides.update(extra)
    lm = load(args)
    return bleed_map(lm, args.method, request, overrides or None, relation=args.relation or relation,
                     n_facts=args.facts, extra=args.prompt,
                     progress=lambda f, m: print(f"[{100 * f:5.1f}%] {m}", file=sys.stderr, flush=True))


def show(out):
    what = f"predicted by {out.formula}" if out.formula else "no predicted share for this method"
    print(f"{out.method} on {out.model}: {out.request.rewrite} -> {out.request.target_new!r}; {what}")
    if out.check:
        print(f"check: max |predicted - measured| / max |change| = {out.check['max_error']:.2e}")
    print(f"{'source':13s} {'share':>7s} {'dP(new)':>8s}  token        prompt")
    for r in sorted(out.rows, key=lambda r: -abs(r.share or 0)):
        share = "      -" if r.share is None else f"{r.share:7.3f}"
        token = "-" if r.token is None else repr(r.token)
        print(f"{r.source:13s} {share} {r.delta_p_new:+8.3f}  {token:12s} {r.prompt}")
    s = out.summary
    if s.neighbours:
        rho = s.spearman_share_vs_rise
        print(f"{s.neighbours} neighbours: mean rise of P(new) {s.mean_delta_p_new:+.3f}, largest "
              f"{s.max_delta_p_new:+.3f}; rank correlation of share and rise "
              f"{'-' if rho is None else f'{rho:.2f}'}")
