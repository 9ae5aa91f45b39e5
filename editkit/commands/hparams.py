"""`python -m editkit hparams --model M [--n 20] [--json]`: hyperparameters for a model without shipped files, by
the rule the shipped ones were chosen with (evaluation/derive.py): the layers from the MLP's average indirect effect
at the last subject token over the first N facts the model knows, the rest from a template model's file. Each
method's values go to $EDITKIT_CACHE/hparams/<method>/<model>.json, where every command and page finds them; a
model with shipped files keeps them (the derived values are printed beside them)."""
import json
import sys

from ..core.errors import EditkitError
from .common import add_model_and_ray, load, ray_backend


def register(sub):
    p = sub.add_parser("hparams", help="derive every method's hyperparameters for a model from its causal traces")
    p.add_argument("--n", type=int, default=20, help="facts traced for the average indirect effect (the first N "
                                                     "the model knows)")
    p.add_argument("--samples", type=int, default=3, help="noise samples per trace")
    p.add_argument("--aie-run", default=None, help="an earlier `aie --json` output of this model, instead of "
                                                   "tracing (a shipped run is used when the model has one)")
    p.add_argument("--methods", default=None, help="comma-separated (default: every registered method)")
    p.add_argument("--template", default=None, help="the shipped model whose files the other values come from "
                                                    "(default: gemma-3-270m for Gemma families, else smollm2-135m)")
    p.add_argument("--dry-run", action="store_true", help="print the values, write nothing")
    add_model_and_ray(p, run, show)


def run(args):
    from ..editing.defaults import shipped_file, user_file
    from ..editing.methods import get
    from ..evaluation.derive import SHIPPED, derive
    from ..tracing.aie import average_indirect_effect, load_run, shipped_runs

    if args.n < 1 or args.samples < 1:
        raise EditkitError("--n and --samples must be at least 1")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    for name in methods or ():
        get(name)  # a method or template named wrong fails before the traces, not after them
    if args.template is not None and args.template not in SHIPPED:
        raise EditkitError(f"--template must be a shipped model ({', '.join(SHIPPED)}), not {args.template!r}")
    backend = ray_backend(args)
    lm = load(args)
    if args.aie_run:
        run_, origin = load_run(args.aie_run), args.aie_run
    elif lm.name in shipped_runs():
        run_, origin = shipped_runs()[lm.name], f"the shipped AIE run of {lm.name}"
    else:
        run_ = average_indirect_effect(lm, args.n, args.samples, progress=_say(), backend=backend)
        origin = f"traced now: {run_.n_facts} facts, {args.samples} samples"
    out = derive(lm, run_, methods, args.template)
    out["aie"] = origin
    for name, entry in out["methods"].items():
        shipped, target = shipped_file(name, lm.name), user_file(name, lm.name)
        if shipped.exists():
            entry["kept"] = str(shipped)  # validated values stay in force; the derived ones are only shown
        elif not args.dry_run:
            target.write_text(json.dumps(entry["hparams"], indent=1) + "\n")
            entry["written"] = str(target)
    return out


def _say():
    """Progress on stderr, each message once (a trace repeats its message at every step)."""
    last = []

    def say(fraction: float, message: str) -> None:
        if not last or last[-1] != message:
            last.append(message)
            print(f"[hparams] {message} ({fraction:.0%})", file=sys.stderr, flush=True)
    return say


def show(out):
    p = out["peak"]
    print(f"{out['model']}: the MLP's AIE at the last subject token peaks at layer {p['layer']} "
          f"({p['effect']:+.3f}, 95% band {p['low']:+.3f} to {p['high']:+.3f}, {p['n_facts']} facts; {out['aie']})")
    print(f"other values from {out['template']}'s files")
    for name, entry in out["methods"].items():
        where = (f"kept the shipped {entry['kept']}" if "kept" in entry else
                 f"written to {entry['written']}" if "written" in entry else "not written (--dry-run)")
        print(f"  {name:>10}: layers {entry['hparams']['layers']} ({entry['placement']}); {where}")
    print("derived, not validated: check them on counterfact-val before reporting, e.g. `python -m editkit sweep "
          "--model ... --method rome --param clamp_norm_factor=1,4 --set counterfact-val --n 30`")
