"""`python -m editkit evaluate --sequential ...`: lifelong editing (evaluation/sequential.py), the part of the
`evaluate` command that runs when `--sequential` is given. Each method applies the N records batch after batch
(`--batch`, per method with `--batch-for rome=1`), each batch at the weights the earlier ones left, measured every
`--eval-every` edits (a fixed random `--sample` of the edits so far at intermediate checkpoints, every edit at the
last); resumable (rerun the same command); with `--ray` the methods run in parallel on a Ray cluster. Not a
command of its own: evaluate.py adds these options to its parser (`add_arguments`) and hands the run over (`run`,
`show`)."""
import json

from ..core.errors import EditkitError
from ..figures.labels import header, legend


def add_arguments(parser) -> None:
    """The `--sequential` option group of the evaluate command."""
    q = parser.add_argument_group("--sequential")
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
    q.add_argument("--no-cache", "--fresh", dest="no_cache", action="store_true",
                   help="ignore a saved checkpoint and start over (--fresh: the earlier name)")
    q.add_argument("--finalize", action="store_true",
                   help="when stopping before the end, measure every edit applied so far (not stored)")
    q.add_argument("--save", default=None, help="also write the results JSON to this file (any evaluate run)")


def batches(args, methods) -> dict:
    """method -> batch size: --batch, or the method's own from --batch-for."""
    out = {m: args.batch for m in methods}
    for part in filter(None, (x.strip() for x in args.batch_for.split(","))):
        name, _, size = part.partition("=")
        if name.strip().lower() not in out or not size.strip().isdigit() or int(size) < 1:
            raise EditkitError(f"--batch-for takes method=size for the chosen methods, not {part!r}")
        out[name.strip().lower()] = int(size)
    return out


def run(args, lm, methods, hparams=None, progress=None, backend=None):
    """Every method's lifelong run on the first --n records of --set (in parallel on Ray with --ray: one worker
    per method, each sequence serial), and the final table."""
    from ..evaluation import load_eval_set
    from ..evaluation.lifelong import Lifelong
    from ..evaluation.sequential import SequentialSpec, sequential_methods

    records = load_eval_set(args.set_name, args.n)
    plans = {method: ((hparams or {}).get(method),
                      SequentialSpec(batch=batch, eval_every=args.eval_every, sample=args.sample or None,
                                     seed=args.seed, ppl_tokens=args.ppl_tokens, fluency_tokens=args.fluency_tokens,
                                     stop_after=args.stop_after, finalize=args.finalize))
             for method, batch in batches(args, methods).items()}
    results = sequential_methods(lm, plans, records, cache=not args.no_cache, progress=progress, backend=backend)
    out = Lifelong(lm.name, args.set_name, len(records), results, Lifelong.of(results, args.set_name).table)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as f:
            json.dump(out.to_json(), f, indent=1)
    return out


def _f(x, fmt=".2f"):
    return "-" if x is None else format(x, fmt)


def show(out) -> None:
    for res in out.runs.values():
        print(f"\n{res.label} on {res.model}, {res.n} edits in batches of {res.batch} "
              f"({res.batches_done}/{res.batches} batches done): base perplexity {res.base_perplexity:.2f}, "
              f"fluency {100 * res.base['fluency']:.1f}")
        for r in res.rows + ([res.partial_final] if res.partial_final else []):
            flag = f"  COLLAPSED: {r['reason']}" if r["collapsed"] else ""
            on = f"{r['measured']} sampled" if r["sampled"] else "all"
            print(f"edits {r['edit']:4d} ({on:>11s}): eff {_f(r['efficacy'])} gen {_f(r['generalization'])} "
                  f"spe {_f(r['specificity'])} kept {_f(r.get('kept'))} loc {_f(r.get('locality'))} "
                  f"ret {_f(r['retention'])} took {_f(r['took'])} "
                  f"flu {100 * r['fluency']:.1f} ppl {r['perplexity']:.2f} ||dW||/||W|| "
                  f"{r['total_relative_norm']:.3f}{flag}")
    print("\nfinal (every edit measured; rates x100, fluency x100):")
    cols = ["efficacy", "generalization", "specificity", "kept", "locality", "score", "retention", "fluency",
            "perplexity", "total_relative_norm"]
    names = {"generalization": "Generaliz.", "specificity": "Specific.", "total_relative_norm": "dW/W"}
    print(f"{'method':12s}{'edits':>7s}" + "".join(f"{header(c, names.get(c, c.capitalize()[:10])):>15s}"
                                                    for c in cols))
    for row in out.table:
        print(f"{row['label']:12s}{row['edits']:>7d}" + "".join(f"{_f(row.get(c), '.2f'):>15s}" for c in cols))
    print(f"{legend(cols)}; kept and locality compare with the original model's answers, cached before the first "
          "edit")
    if out.runs:
        print(next(iter(out.runs.values())).notes)
