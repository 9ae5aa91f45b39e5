"""`python -m editkit evaluate --methods rome,memit,pmet --n 100 [--batch 1|10|100] [--set counterfact] --json`:
edit and measure records of a shipped evaluation set; a table like PMET's Table 1; resumable; `--ray` spreads the
batches of records over a Ray cluster.

`--sequential`: lifelong editing instead, batch after batch on the weights the earlier ones left (its options and
output: commands/lifelong.py)."""
import json
import sys

from ..core.errors import EditkitError
from ..figures.labels import header, legend
from . import lifelong
from .common import add_model_and_ray, load, ray_backend


def register(sub):
    from ..editing.methods import builtin_names

    p = sub.add_parser("evaluate", help="CounterFact/EasyEdit metrics of the editing methods over a shipped set")
    p.add_argument("--methods", default=None,
                   help=f"comma-separated (default: every registered method): {', '.join(builtin_names())}")
    p.add_argument("--n", type=int, default=100, help="records to edit (the first N of the set)")
    p.add_argument("--batch", type=int, default=1, help="requests per edit (1 = one edit per record)")
    p.add_argument("--set", dest="set_name", default="counterfact",
                   help="a shipped set (see --list-sets) or a .json/.jsonl file of CounterFact (ROME schema), "
                        "EasyEdit or zsRE (MEND schema) records")
    p.add_argument("--list-sets", action="store_true", help="list the shipped evaluation sets and exit")
    p.add_argument("--gen-prompts", type=int, default=1,
                   help="generation prompts per record for fluency/consistency (ROME: 10; 0 = none)")
    p.add_argument("--gen-tokens", type=int, default=40, help="tokens sampled per generation prompt (ROME: 100)")
    p.add_argument("--greedy-tokens", type=int, default=12,
                   help="greedy tokens for the generation-based efficacy (QAEdit; 0 = off)")
    p.add_argument("--hparams-json", default=None,
                   help='overrides per method as JSON, e.g. \'{"rome": {"mom2_shrinkage": 0}}\'')
    p.add_argument("--reuse-targets", action="store_true",
                   help="reuse target vectors of earlier runs that differ only in the solve (statistics, lambda)")
    p.add_argument("--out", default=None, help="results folder (default: the editkit cache); reruns resume")
    p.add_argument("--ripple", action="store_true",
                   help="instead: ripple effects, the share of implied facts that move / stay with each method "
                        "and the in-context reference (--methods may name in-context; --set counterfact or "
                        "counterfact-val); its files go to assets/results/ripple/<model>/ in a checkout "
                        "(--out to change), one line per edit, and a rerun resumes")
    p.add_argument("--report-only", action="store_true",
                   help="with --ripple: only tabulate the rows already written (a partial table); "
                        "edit nothing")
    p.add_argument("--sequential", action="store_true",
                   help="instead: lifelong editing, batch after batch on the weights the earlier ones left")
    lifelong.add_arguments(p)
    add_model_and_ray(p, run, show)


def run(args):
    from ..evaluation import EVAL_SETS, EvalSpec, evaluate, load_eval_set

    if args.list_sets:
        return {"sets": {name: desc for name, (_, _, desc) in EVAL_SETS.items()}}
    from ..editing.methods import names

    methods = [m.strip().lower() for m in (args.methods or ",".join(names())).split(",") if m.strip()]
    if not methods:
        raise EditkitError("give at least one method")
    if (args.n < 1 or args.batch < 1 or args.gen_prompts < 0 or args.gen_tokens < 1 or args.ppl_tokens < 2
            or args.greedy_tokens < 0):
        raise EditkitError("--n, --batch and --gen-tokens must be at least 1, --gen-prompts and --greedy-tokens at "
                           "least 0, --ppl-tokens at least 2")
    sequential_only = [flag for flag, given in (("--batch-for", args.batch_for), ("--eval-every", args.eval_every),
                                                ("--stop-after", args.stop_after), ("--finalize", args.finalize))
                       if given]
    if sequential_only and not args.sequential:  # never accepted and then silently ignored
        raise EditkitError(f"{', '.join(sequential_only)}: only for --sequential runs")
    if args.ripple and args.set_name not in ("counterfact", "counterfact-val"):
        raise EditkitError("--ripple evaluates --set counterfact or counterfact-val")
    if args.report_only and not args.ripple:
        raise EditkitError("--report-only tabulates a --ripple run's rows: add --ripple")
    if args.ripple and args.sequential:
        raise EditkitError("--ripple and --sequential are two different evaluations: pick one")
    if args.sequential and args.out:  # it would be ignored: a lifelong run writes no results folder
        raise EditkitError("--out: a --sequential run keeps its checkpoints in the editkit cache (EDITKIT_CACHE) "
                           "and writes its results with --save FILE")
    load_eval_set(args.set_name, 1)  # an unknown set fails before the model loads
    backend = ray_backend(args)  # a malformed --ray fails before the model loads
    hparams = None
    if args.hparams_json:
        try:
            hparams = json.loads(args.hparams_json)
        except ValueError as exc:
            raise EditkitError(f"--hparams-json is not valid JSON: {exc}") from None
        if not isinstance(hparams, dict) or not all(isinstance(v, dict) for v in hparams.values()):
            raise EditkitError('--hparams-json must map methods to overrides: {"rome": {"v_lr": 0.1}}')
    lm = load(args)

    def progress(f, msg):
        print(f"[{100 * f:5.1f}%] {msg}", file=sys.stderr, flush=True)

    if args.sequential:
        return lifelong.run(args, lm, methods, hparams, progress, backend)
    if args.ripple:
        return ripple_run(args, lm, methods, hparams, progress, backend)
    spec = EvalSpec(set_name=args.set_name, n=args.n, batch=args.batch, n_gen=args.gen_prompts,
                    gen_tokens=args.gen_tokens, greedy_tokens=args.greedy_tokens)
    out = evaluate(lm, methods, spec, hparams, out_dir=args.out, reuse_targets=args.reuse_targets,
                   progress=progress, backend=backend)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            json.dump(out.to_json(), f, indent=1)
    return out


def ripple_run(args, lm, methods, hparams, progress, backend):
    from ..evaluation.ripple import IN_CONTEXT
    from ..evaluation.ripple_eval import RippleSpec, evaluate_ripple

    if IN_CONTEXT not in methods:  # the bar every weight edit is read against
        methods = methods + [IN_CONTEXT]
    out = evaluate_ripple(lm, methods, RippleSpec(set_name=args.set_name, n=args.n), hparams, out_dir=args.out,
                          backend=backend, progress=progress, run=not args.report_only).to_json()
    out["ripple"] = True
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return out


def show_ripple(out):
    from ..data.implications import CRITERIA
    from ..figures.ripple import COLUMNS

    print(f"Ripple effects on {out['model']}, {out['n']} edits of {out['set']} (each edited alone); implied facts: "
          + ", ".join(f"{v} {k}" for k, v in out["facts"].items()))
    done = out.get("done") or {}
    if any(v < out["n"] for v in done.values()):
        print("PARTIAL: edits with a row so far: " + ", ".join(f"{m} {v}" for m, v in done.items())
              + f" of {out['n']} (a rerun without --report-only resumes)")
    print("% of implied facts that moved / stayed as they should, mean over edits ± 95% half-width; [d vs "
          f"{out['against'].upper()}: paired difference]")
    cols = [c for c, _ in COLUMNS]
    print(f"{'':22s}{'edits':>6s}" + "".join(f"{label:>26s}" for _, label in COLUMNS))
    for m, cells in out["table"].items():
        line = ""
        for c in cols:
            cell = cells.get(c)
            if not cell:
                line += f"{'-':>26s}"
                continue
            text = f"{cell['mean']:5.1f}±{cell['ci95'] or 0:4.1f}"
            if "diff" in cell:
                d = cell["diff"]
                text += f" [d {d['mean']:+5.1f}±{d['ci95'] or 0:4.1f}]"
            line += f"{text:>26s}"
        print(f"{m:22s}{done.get(m, out['n']):>6d}{line}")
    print("criteria: " + "; ".join(f"{k} = {v}" for k, v in CRITERIA.items()) + "; efficacy = P(new) > P(true) on "
          "the rewrite; neighb. specificity = neighbourhood prompts keeping P(true) > P(new), after the edit, and "
          "its change from before")


def _fmt(cell):
    if not cell or cell.get("mean") is None:
        return "   -   "
    ci = cell.get("ci95")
    return f"{cell['mean']:6.1f}" + (f" ±{ci:4.1f}" if ci is not None else "")


def show(out):
    if isinstance(out, dict) and "sets" in out:
        for name, desc in out["sets"].items():
            print(f"{name:20s} {desc}")
        return
    from ..evaluation.lifelong import Lifelong

    if isinstance(out, Lifelong):  # --sequential
        lifelong.show(out)
        return
    if isinstance(out, dict) and out.get("ripple"):
        show_ripple(out)
        return
    print(f"{out.model} on {out.set} ({out.n} records, batch {out.batch}); mean ± 95% half-width")
    from ..evaluation.evaluate import COLUMNS

    cols = list(COLUMNS)
    names = {"gen_efficacy": "Gen. eff.", "gen_generalization": "Gen. gen.", "generalization_acc": "Gen. acc",
             "reliability": "Reliab.", "generalization": "Generaliz.", "specificity": "Specific.",
             "consistency": "Consist."}
    kind = out.metric_family
    print(f"{'':14s}" + "".join(f"{header(c, names.get(c, c.capitalize()[:10]), kind):>15s}" for c in cols)
          + "   s/request")

    def line(method, when):
        # Score = harmonic mean of the mean efficacy, generalization and specificity (PMET Table 1)
        return "".join(f"{_fmt(out.cell(method, when, c)):>15s}" for c in cols)

    for i, (method, t) in enumerate(out.methods.items()):
        if i == 0:  # the same records before any edit: one row serves every method
            print(f"{'(pre-edit)':14s}{line(method, 'pre')}")
        seconds = t["seconds_per_request"]
        print(f"{method.upper():14s}{line(method, 'post')}   {'-' if seconds is None else format(seconds, '.1f')}")
    g = out.generation
    print(f"generation: {g['n_gen']} prompt(s) x {g['gen_tokens']} tokens per record ({g['sampling']}, seed "
          f"{g['seed']}); Gen. eff./gen. = greedy {g.get('greedy_tokens', 0)}-token continuation of the rewrite/"
          f"paraphrase prompts says the new target and not the true one (QAEdit); {out.computed_records} "
          "record(s) computed now, the rest read from the results files")
    print(f"{legend(cols, kind)}; locality = the neighborhood (or locality) answer's argmax tokens unchanged by the "
          "edit (EasyEdit)")
    print(out.notes)
