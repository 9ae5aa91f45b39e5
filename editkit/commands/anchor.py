"""`python -m editkit anchor --method rome --set counterfact-val --n 30 [--json]`: norm-anchor scaling's n_bar
(NAS, editing/anchor.py) for a method on this model, estimated as upstream does from its edits of the unedited
model; pass the result as the `nas_anchor` hyperparameter."""
import json
import statistics

from ..core.errors import EditkitError
from .common import add_model_arg, load


def register(sub):
    p = sub.add_parser("anchor", help="NAS's reference norm n_bar for a method: mean ||v*|| of edits on the "
                                      "unedited model")
    p.add_argument("--method", default="rome", help="a method with the nas_anchor option (rome, memit, pmet, "
                                                   "alphaedit)")
    p.add_argument("--set", dest="set_name", default="counterfact-val",
                   help="the records whose requests are edited (a shipped set or a file; validation by default)")
    p.add_argument("--n", type=int, default=30, help="requests (the first N of the set)")
    p.add_argument("--quantile", type=float, default=0.95, help="norms above this quantile are dropped (NAS: 0.95)")
    p.add_argument("--hparams-json", default=None,
                   help="overrides as in evaluate, e.g. '{\"rome\": {\"clamp_norm_factor\": 1}}'")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    from ..editing.memo import reuse_targets
    from ..editing.run import anchor_from_edits
    from ..evaluation import load_eval_set, requests_of

    if args.n < 1:
        raise EditkitError("--n must be at least 1")
    if not 0 < args.quantile <= 1:
        raise EditkitError("--quantile must be in (0, 1]")
    try:
        overrides = json.loads(args.hparams_json) if args.hparams_json else None
    except json.JSONDecodeError as e:
        raise EditkitError(f"--hparams-json is not JSON: {e}") from None
    if overrides is not None and not (isinstance(overrides, dict) and all(isinstance(v, dict) for v in
                                                                          overrides.values())):
        raise EditkitError("--hparams-json must map a method to its overrides, e.g. '{\"rome\": {...}}'")
    requests = requests_of(load_eval_set(args.set_name, args.n))
    lm = load(args)
    with reuse_targets():  # a later run with the anchor set reuses these targets (only the scaling differs)
        own = (overrides or {}).get(args.method.lower())
        out = anchor_from_edits(lm, args.method, requests, own, quantile=args.quantile)
    return {"model": lm.name, "set": args.set_name, **out.to_json()}  # the JSON edge: the estimate and where


def show(out):
    norms = out["norms"]
    print(f"{out['model']} {out['method']}: n_bar = {out['anchor']:.4g} (mean ||v*|| of {out['kept']} of "
          f"{out['n']} edits of {out['set']}, norms above the {out['quantile']:g} quantile dropped; median "
          f"{statistics.median(norms):.4g}, max {max(norms):.4g})")
    shifts = out["shift_norms"]
    median = statistics.median(shifts)
    print(f"the target shift ||v* - v|| (what v_max_norm bounds): median {median:.4g}, max {max(shifts):.4g}")
    print(f'use it: --hparams-json \'{{"{out["method"]}": {{"nas_anchor": {out["anchor"]:.4g}}}}}\'')
    # the shift bound is in model units at the method's own layer: ROME's 3.3 on Gemma was its median shift;
    # copied to MEMIT (median 415) it kept under 1% of each shift, and no edit took (docs/results/lifelong.md)
    print(f'the shift bound by the same rule (the median shift at this layer): --hparams-json '
          f'\'{{"{out["method"]}": {{"v_stop_top1": 2, "v_max_norm": {median:.4g}}}}}\'')
