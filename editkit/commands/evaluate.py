"""`python -m editkit evaluate --methods rome,memit,pmet --n 100 [--batch 1|10|100] [--set counterfact] --json`:
edit and measure records of a shipped evaluation set; a table like PMET's Table 1; resumable.

`--sequential`: lifelong editing instead (evaluation/sequential.py): each method applies the N records batch after
batch (`--batch`, per method with `--batch-for rome=1`), each batch at the weights the earlier ones left, measured
every `--eval-every` edits (a fixed random `--sample` of the edits so far at intermediate checkpoints, every edit at
the last); resumable (rerun the same command)."""
import json
import sys

from ..cli import add_model_arg, load
from ..errors import EditkitError


def register(sub):
    from ..editing.methods import names

    p = sub.add_parser("evaluate", help="CounterFact/EasyEdit metrics of the editing methods over a shipped set")
    p.add_argument("--methods", default=",".join(names()), help=f"comma-separated: {', '.join(names())}")
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
    p.add_argument("--sequential", action="store_true",
                   help="instead: lifelong editing, batch after batch on the weights the earlier ones left")
    q = p.add_argument_group("--sequential")
    q.add_argument("--batch-for", default="", help="per-method batch sizes, e.g. rome=1 (others: --batch)")
    q.add_argument("--eval-every", type=int, default=None,
                   help="edits between checkpoints (default: every batch; a multiple of each method's batch)")
    q.add_argument("--sample", type=int, default=50,
                   help="edits measured at intermediate checkpoints (a fixed random sample; 0 = all)")
    q.add_argument("--seed", type=int, default=0, help="seed of the sample and of the fluency generations")
    q.add_argument("--ppl-tokens", type=int, default=2048, help="WikiText test tokens for perplexity")
    q.add_argument("--fluency-tokens", type=int, default=40, help="tokens sampled per fluency prompt")
    q.add_argument("--stop-after", type=int, default=None,
                   help="end after this many batches per method (rerun to continue)")
    q.add_argument("--fresh", action="store_true", help="ignore a saved checkpoint and start over")
    q.add_argument("--finalize", action="store_true",
                   help="when stopping before the end, measure every edit applied so far (not stored)")
    q.add_argument("--save", default=None, help="also write the results JSON to this file")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    from ..evaluation import EVAL_SETS, evaluate, load_eval_set, sequential

    if args.list_sets:
        return {"sets": {name: desc for name, (_, _, desc) in EVAL_SETS.items()}}
    methods = [m.strip().lower() for m in args.methods.split(",") if m.strip()]
    if not methods:
        raise EditkitError("give at least one method")
    if (args.n < 1 or args.batch < 1 or args.gen_prompts < 0 or args.gen_tokens < 1 or args.ppl_tokens < 2
            or args.greedy_tokens < 0):
        raise EditkitError("--n, --batch and --gen-tokens must be at least 1, --gen-prompts and --greedy-tokens at "
                           "least 0, --ppl-tokens at least 2")
    load_eval_set(args.set_name, 1)  # an unknown set fails before the model loads
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
        return _sequential(args, lm, methods, progress, hparams)
    return evaluate(lm, methods, n=args.n, batch=args.batch, set_name=args.set_name, n_gen=args.gen_prompts,
                    gen_tokens=args.gen_tokens, out_dir=args.out, progress=progress,
                    greedy_tokens=args.greedy_tokens, hparams=hparams, reuse_targets=args.reuse_targets)


def _batches(args, methods) -> dict:
    out = {m: args.batch for m in methods}
    for part in filter(None, (x.strip() for x in args.batch_for.split(","))):
        name, _, size = part.partition("=")
        if name.strip().lower() not in out or not size.strip().isdigit() or int(size) < 1:
            raise EditkitError(f"--batch-for takes method=size for the chosen methods, not {part!r}")
        out[name.strip().lower()] = int(size)
    return out


def _sequential(args, lm, methods, progress, hparams=None):
    import json

    from ..evaluation import load_eval_set
    from ..evaluation.lifelong import final_table
    from ..evaluation.sequential import sequential

    records = load_eval_set(args.set_name, args.n)
    results = {}
    for method, batch in _batches(args, methods).items():
        every = args.eval_every if args.eval_every is not None else batch
        results[method] = sequential(lm, method, records, (hparams or {}).get(method), batch=batch, eval_every=every,
                                     sample=args.sample or None, seed=args.seed, ppl_tokens=args.ppl_tokens,
                                     fluency_tokens=args.fluency_tokens, resume=not args.fresh,
                                     stop_after=args.stop_after, finalize=args.finalize, progress=progress)
    out = {"model": lm.name, "set": args.set_name, "n": len(records), "sequential": results,
           "table": final_table(results)}
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    return out


def _fmt(cell):
    if not cell or cell.get("mean") is None:
        return "   -   "
    ci = cell.get("ci95")
    return f"{cell['mean']:6.1f}" + (f" ±{ci:4.1f}" if ci is not None else "")


def _f(x, fmt=".2f"):
    return "-" if x is None else format(x, fmt)


def show(out):
    if "sets" in out:
        for name, desc in out["sets"].items():
            print(f"{name:20s} {desc}")
        return
    if "sequential" in out:
        _show_sequential(out)
        return
    print(f"{out['model']} on {out['set']} ({out['n']} records, batch {out['batch']}); mean ± 95% half-width")
    cols = ["score", "efficacy", "generalization", "specificity", "fluency", "consistency", "gen_efficacy",
            "gen_generalization"]
    names = {"gen_efficacy": "Gen. eff.", "gen_generalization": "Gen. gen."}
    print(f"{'':14s}" + "".join(f"{names.get(c, c.capitalize()):>15s}" for c in cols) + "   s/request")
    def line(t, when):
        # Score = harmonic mean of the mean efficacy, generalization and specificity (PMET Table 1)
        return "".join(f"{_fmt({'mean': t.get(when + '_table_score')} if c == 'score' else t.get(when + '_' + c)):>15s}"
                       for c in cols)

    for i, (method, t) in enumerate(out["methods"].items()):
        if i == 0:  # the same records before any edit: one row serves every method
            print(f"{'(pre-edit)':14s}{line(t, 'pre')}")
        print(f"{method.upper():14s}{line(t, 'post')}   {_f(t['seconds_per_request'], '.1f')}")
    g = out["generation"]
    print(f"generation: {g['n_gen']} prompt(s) x {g['gen_tokens']} tokens per record ({g['sampling']}, seed "
          f"{g['seed']}); Gen. eff./gen. = greedy {g.get('greedy_tokens', 0)}-token continuation of the rewrite/"
          f"paraphrase prompts says the new target and not the true one (QAEdit); {out['computed_records']} "
          "record(s) computed now, the rest read from the results files")
    print(out["notes"])


def _show_sequential(out):
    for method, res in out["sequential"].items():
        print(f"\n{res['label']} on {res['model']}, {res['n']} edits in batches of {res['batch']} "
              f"({res['batches_done']}/{res['batches']} batches done): base perplexity {res['base_perplexity']:.2f}, "
              f"fluency {100 * res['base']['fluency']:.1f}")
        for r in res["rows"] + ([res["partial_final"]] if res.get("partial_final") else []):
            flag = f"  COLLAPSED: {r['reason']}" if r["collapsed"] else ""
            on = f"{r['measured']} sampled" if r["sampled"] else "all"
            print(f"edits {r['edit']:4d} ({on:>11s}): eff {_f(r['efficacy'])} gen {_f(r['generalization'])} "
                  f"spe {_f(r['specificity'])} ret {_f(r['retention'])} took {_f(r['took'])} "
                  f"flu {100 * r['fluency']:.1f} ppl {r['perplexity']:.2f} ||dW||/||W|| "
                  f"{r['total_relative_norm']:.3f}{flag}")
    print("\nfinal (every edit measured; rates x100, fluency x100):")
    cols = ["efficacy", "generalization", "specificity", "score", "retention", "fluency", "perplexity",
            "total_relative_norm"]
    print(f"{'method':12s}{'edits':>7s}" + "".join(f"{c[:12]:>13s}" for c in cols))
    for row in out["table"]:
        print(f"{row['label']:12s}{row['edits']:>7d}" + "".join(f"{_f(row.get(c), '.2f'):>13s}" for c in cols))
    if out["sequential"]:
        print(next(iter(out["sequential"].values()))["notes"])
