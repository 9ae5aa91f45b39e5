"""`python -m editkit bench trace|edit|fast|preview|scale|report|startup [...] [--json]`: benchmarks that time
editkit against the reference algorithm in the same run, an evaluation in process against 1, 2, ... Ray workers,
and the start-up against an earlier commit. The measurements live in the library (tracing/bench.py,
tracing/agreement.py, editing/bench.py, evaluation/scale.py, evaluation/startup.py); this file parses the
arguments and prints."""
import sys

from .common import add_model_arg, load


def register(sub):
    p = sub.add_parser("bench", help="benchmarks on the embedded model")
    inner = p.add_subparsers(dest="bench", required=True)
    for add in (_add_trace, _add_edit, _add_known_facts, _add_report, _add_scale, _add_startup):
        add(inner)


def _threads(q, default=None, about="torch threads (default: torch's own)") -> None:
    q.add_argument("--threads", type=int, default=default, help=about)


def _add_trace(inner) -> None:
    t = inner.add_parser("trace", help="causal tracing: the fast engine against ROME's algorithm, same noise")
    t.add_argument("--prompt", default="The Space Needle is in downtown")
    t.add_argument("--subject", default="Space Needle")
    t.add_argument("--kinds", default="hidden,mlp,attn")
    t.add_argument("--samples", type=int, default=10)
    t.add_argument("--last-only-reference", action="store_true",
                   help="(always on now) also time the reference with logits at the last position only")
    t.add_argument("--no-reference", action="store_true", help="skip ROME's algorithm (engine and preview only)")
    t.add_argument("--facts", type=int, default=20,
                   help="known facts for the preview's rank correlation (0: only the prompt)")
    _threads(t, about="torch threads (default: torch's own); 1 gives steadier ratios on a busy machine")
    add_model_arg(t)
    t.set_defaults(func=run_trace, show=show)


def _add_edit(inner) -> None:
    e = inner.add_parser("edit", help="editing: every method on one request and a batch, statistics cached")
    e.add_argument("--n", type=int, default=10, help="requests in the batch")
    e.add_argument("--methods", default=None, help="comma-separated methods (default: all registered)")
    e.add_argument("--hparams", default=None,
                   help="JSON file of overrides for every method, e.g. an early-stopping rule {\"v_stop_top1\": 1}")
    _threads(e)
    e.add_argument("--no-reference", action="store_true",
                   help="skip the reference run (the first method with the full model at every optimisation "
                        "step)")
    add_model_arg(e)
    e.set_defaults(func=run_edit, show=show)


def _add_known_facts(inner) -> None:
    """`fast` and `preview`: an approximation against the exact panels over the first N known facts."""
    about = {"fast": ("the tracing engine's fast mode (bf16) against the exact panels over known facts: its "
                      "largest score difference, shown beside every fast figure", "app", run_fast, show_fast),
             "preview": ("the attribution preview against the exact panels over known facts: its agreement per "
                         "panel, shown beside every preview", "API", run_preview, show_preview)}
    for name, (helptext, reader, func, shown) in about.items():
        q = inner.add_parser(name, help=helptext)
        q.add_argument("--facts", type=int, default=20, help="known facts the model predicts (the first N)")
        q.add_argument("--samples", type=int, default=10)
        q.add_argument("--save", default=None,
                       help=f"write the result here (the {reader} reads assets/results/trace-{name}-<model>.json)")
        _threads(q)
        add_model_arg(q)
        q.set_defaults(func=func, show=shown)


def _add_report(inner) -> None:
    r = inner.add_parser("report", help="the headline measurements in one process (tracing, edits, a lesson fact, "
                                        "the lesson's steps, first use) as a markdown report with the goals")
    r.add_argument("--out", default="bench-report.md", help="the markdown report (default: bench-report.md)")
    r.add_argument("--save-json", default=None, help="also write every measurement as JSON to this file")
    r.add_argument("--skip", default="", help="sections to skip, comma-separated: tracing, edits, lesson, "
                                              "lesson-under-load, steps, first-use (first-use and the lessons are "
                                              "the long ones)")
    r.add_argument("--reference", default="hidden",
                   help="panels timed with ROME's algorithm for the speed-up: hidden (default), all or none (each "
                        "takes over a minute)")
    _threads(r)
    add_model_arg(r)
    r.set_defaults(func=run_report, show=show_report)


def _add_scale(inner) -> None:
    s = inner.add_parser("scale", help="one evaluation in process and on 1, 2, ... Ray workers (local clusters): "
                                       "per-record cost, fixed costs, speed-up")
    s.add_argument("--records", type=int, default=20, help="records evaluated (the first N of --set)")
    s.add_argument("--workers", default="1,2", help="worker counts, comma-separated (e.g. 1,2,4,8)")
    s.add_argument("--method", default="rome", help="the method, at batch 1 with its default hyperparameters")
    s.add_argument("--set", dest="set_name", default="counterfact")
    _threads(s, default=1, about="torch threads of the in-process run (a worker has 1)")
    s.add_argument("--model", default="gemma-3-270m")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_scale, show=show_scale)


def _add_startup(inner) -> None:
    u = inner.add_parser("startup", help="start-up from a fresh process with the model cached: --help, "
                                         "predict, editkit.load and the app's first page, per phase")
    u.add_argument("--model", default="gemma-3-270m", help="the model predict and load (converted first)")
    u.add_argument("--runs", type=int, default=3, help="runs per measurement after a warm-up (best, median)")
    u.add_argument("--only", default=None,
                   help="measurements, comma-separated: help, predict, load, first-use, app")
    u.add_argument("--reference", default=None, metavar="COMMIT",
                   help="also measure this git commit's code in the same run (e.g. the one before a change)")
    u.add_argument("--port", type=int, default=None, help="the app's port (default: a free one)")
    u.add_argument("--json", action="store_true")
    u.set_defaults(func=run_startup, show=show_startup)


def _line(row: dict) -> str:
    return "  ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items())


def _say(row: dict) -> None:
    print(_line(row), file=sys.stderr, flush=True)


def show(out: dict) -> None:
    print("  ".join(f"{k} {v}" for k, v in out.items() if not isinstance(v, (list, dict))))
    for k, v in out.items():
        if isinstance(v, dict):
            print(f"{k}: {v}")
    for row in out["results"]:
        print(_line(row))


def run_trace(args):
    import torch

    from ..tracing.bench import bench_trace

    if args.threads is not None:
        torch.set_num_threads(max(1, args.threads))
    return bench_trace(load(args), args.prompt, args.subject, args.kinds.split(","), args.samples,
                       reference=not args.no_reference, facts=max(0, args.facts), say=_say)


def _known_facts(args, measure):
    """Run `measure(lm, facts, samples, say)` over the first known facts; --save writes its JSON."""
    import json

    import torch

    from ..core.errors import EditkitError

    if args.facts < 1 or args.samples < 1:
        raise EditkitError("--facts and --samples must be at least 1")
    if args.threads is not None:
        torch.set_num_threads(max(1, args.threads))
    out = measure(load(args), args.facts, args.samples, say=_say)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    return out


def run_fast(args):
    from ..tracing.bench import fast_mode_error

    return _known_facts(args, fast_mode_error)


def show_fast(out: dict) -> None:
    print(f"fast mode (bf16) on {out['model']}, {out['facts']} known facts, {out['samples']} samples: largest |score "
          f"difference| from the exact panels {out['max_abs_diff']:.4f} (per panel: "
          + ", ".join(f"{k} {v:.4f}" for k, v in out["max_abs_diff_per_kind"].items())
          + f"; mean of the per-fact maxima {out['mean_max_abs_diff']:.4f})")


def run_preview(args):
    from ..tracing.bench import preview_agreement

    return _known_facts(args, preview_agreement)


def show_preview(out: dict) -> None:
    print(f"attribution preview on {out['model']}, {out['facts']} known facts, {out['samples']} samples "
          f"({out['seconds']} s):")
    for kind, s in out["panels"].items():
        print(f"  {kind}: Spearman mean {s['spearman_mean']:.3f} (min {s['spearman_min']:.3f}), Pearson "
              f"{s['pearson_mean']:.3f}, top-10 overlap {s['top10_overlap_mean']:.1f}/10, peak at the exact "
              f"peak's token {s['peak_same_token']:.0%}{'  POOR' if s['poor'] else ''}")


def run_edit(args):
    import torch

    from ..core.errors import EditkitError
    from ..editing.bench import bench_edit
    from ..editing.defaults import load_hparams_file
    from ..editing.methods import get

    if args.threads is not None:
        torch.set_num_threads(max(1, args.threads))
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    for name in methods or ():
        get(name)  # a method named wrong fails before the model loads
    if args.n < 1:
        raise EditkitError(f"--n must be at least 1, not {args.n}")
    overrides = load_hparams_file(args.hparams) if args.hparams else None
    return bench_edit(load(args), args.n, not args.no_reference, methods, say=_say, overrides=overrides)


SECTIONS = ("tracing", "edits", "lesson", "lesson-under-load", "steps", "first-use")


def run_report(args):
    import json

    import torch

    from ..core.errors import EditkitError
    from ..evaluation.bench_report import ReportSpec, bench_report, to_markdown

    skip = {x.strip() for x in args.skip.split(",") if x.strip()}
    if skip - set(SECTIONS):
        raise EditkitError(f"--skip takes {', '.join(SECTIONS)}, not {', '.join(sorted(skip - set(SECTIONS)))}")
    kinds = {"hidden": ("hidden",), "all": ("hidden", "mlp", "attn"), "none": ()}.get(args.reference)
    if kinds is None:
        raise EditkitError("--reference is hidden, all or none")
    if args.threads is not None:
        torch.set_num_threads(max(1, args.threads))
    spec = ReportSpec(**{s.replace("-", "_"): s not in skip for s in SECTIONS}, reference_kinds=kinds)
    out = bench_report(load(args), spec, say=_say)
    text = to_markdown(out)
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(text)
    if args.save_json:
        with open(args.save_json, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=1)
    out["markdown"], out["written"] = text, args.out
    return out


def show_report(out: dict) -> None:
    print(out["markdown"])
    print(f"(written to {out['written']})")


def run_scale(args):
    from ..core.errors import EditkitError
    from ..evaluation.scale import ScaleSpec, bench_scale

    try:
        workers = tuple(int(w) for w in args.workers.split(",") if w.strip())
    except ValueError:
        raise EditkitError(f"--workers takes whole numbers separated by commas, not {args.workers!r}") from None
    spec = ScaleSpec(records=args.records, workers=workers, method=args.method.lower(), set_name=args.set_name,
                     threads=args.threads)
    spec.check()
    return bench_scale(load(args), spec, say=_say)


def show_scale(out: dict) -> None:
    s = out["spec"]
    print(f"{s['method']} on {out['model']}, {s['records']} records of {s['set_name']} at batch 1; {out['cpus']} "
          f"CPUs; statistics ready in {out['prepare_s']} s (not counted)")
    print(f"{'':12s}{'s/record':>10s}{'speed-up':>10s}{'cluster s':>11s}{'workers s':>11s}  equal  load average")
    for r in out["results"]:
        print(f"{r['config']:12s}{r['seconds_per_record']:10.2f}{r['speedup']:10.2f}"
              f"{r.get('cluster_start_s', '-'):>11}{r.get('workers_start_s', '-'):>11}  {str(r['equal']):5s}  "
              f"{r['load_average']}")
    for line in out["bound"]:
        print(line)
    p = out["projection"]
    if p:
        print(f"{p['records']} records at {p['seconds_per_record']} s each + {p['fixed_s']} s fixed: "
              + ", ".join(f"{n} workers {sec / 60:.0f} min" for n, sec in p["seconds"].items()))


def run_startup(args):
    from ..evaluation.startup import MEASUREMENTS, StartupSpec, bench_startup

    only = tuple(m.strip() for m in args.only.split(",") if m.strip()) if args.only else MEASUREMENTS
    spec = StartupSpec(model=args.model, runs=args.runs, measurements=only, reference=args.reference,
                       port=args.port)
    return bench_startup(spec, say=lambda line: print(line, file=sys.stderr, flush=True))


def show_startup(out) -> None:
    r = out.to_json()
    m = r["machine"]
    print(f"{m['cpu']}, {m['cores']} cores, load average {m['load_average']} -> {r['load_average_end']}; "
          f"model {r['model']}; best and median of {r['spec']['runs']} runs after a warm-up")
    for label, code in r["codes"].items():
        print(f"[{label}] {code.get('commit') or code['root']}")
        for name in r["spec"]["measurements"]:
            row = code.get(name, {})
            if "skipped" in row:
                print(f"  {name:8s} skipped: {row['skipped']}")
                continue
            cpu_phases = row.get("cpu_phases", {})
            phases = ", ".join(f"{p} {s:.2f}" + (f" ({cpu_phases[p]:.2f} CPU)" if p in cpu_phases else "")
                               for p, s in row.get("phases", {}).items())
            cpu = f"  CPU {row['cpu_best']:.2f} s" if "cpu_best" in row else ""
            print(f"  {name:8s} best {row['best']:6.2f} s  median {row['median']:6.2f} s{cpu}"
                  + (f"  ({phases})" if phases else ""))
    for name, g in r["goals"].items():
        print(f"goal {name} < {g['goal']} s: best {g['best']:.2f} s, {'met' if g['met'] else 'missed'}")
