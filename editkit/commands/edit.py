"""`python -m editkit edit --method M --requests FILE [--hparams FILE] [--save-patch P] [--report FILE.html]
--json`: any registered method (editing/methods/)."""
from ..core.errors import EditkitError
from .common import add_model_arg, load


def register(sub):
    from ..editing.methods import builtin_names

    p = sub.add_parser("edit", help="edit facts with a registered method and report pre/post probabilities")
    p.add_argument("--method", required=True, help=f"one of {', '.join(builtin_names())}")
    p.add_argument("--requests", required=True,
                   help="JSON/JSONL file of editkit, CounterFact or EasyEdit records; editkit's fields: prompt "
                        "(with {} for the subject), subject, target_new; optional target_true, paraphrase_prompts, "
                        "neighborhood_prompts, generation_prompts, case_id, relation (the Wikidata relation, e.g. "
                        "P131, that implied facts derive from)")
    p.add_argument("--hparams", default=None, help="JSON file of hyperparameter overrides")
    p.add_argument("--save-patch", default=None, help="write the edit as <P>.safetensors + <P>.json")
    p.add_argument("--save-model", default=None,
                   help="write the edited model as a Hugging Face folder (new or empty; `editkit "
                        "export` also writes GGUF)")
    p.add_argument("--report", default=None, metavar="FILE.html",
                   help="write the edit as one self-contained HTML report (a new file, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the --report file and the --save-patch files if they exist")
    p.add_argument("--n", type=int, default=None, help="use the first N requests of the file")
    add_model_arg(p)
    p.set_defaults(func=run, show=show)


def run(args):
    from ..editing.defaults import load_hparams_file
    from ..editing.methods import get
    from ..editing.requests import parse_requests
    from ..evaluation.report import edit_report
    from ..model.weights import save_patch

    args.method = get(args.method).name  # an unknown one fails before the model loads, naming the registered ones
    requests = parse_requests(args.requests)
    if args.n is not None:
        if args.n < 1:
            raise EditkitError("--n must be at least 1")
        requests = requests[: args.n]
    overrides = load_hparams_file(args.hparams) if args.hparams else None
    _check_outputs(args)
    lm = load(args)
    report = edit_report(lm, args.method, requests, overrides)
    if args.save_model:
        report.export_hf(args.save_model)  # the loaded weights stay as they are
    if args.save_patch:
        hparams = report.result.info.get("hparams")
        path = save_patch(args.save_patch, report.delta, {"model": lm.name, "method": args.method,
                                                          "requests": [r.to_dict() for r in requests],
                                                          "hparams": hparams})
        report.patch = str(path)
    if args.report:
        report.report(args.report, command=_command(args), overwrite=args.overwrite)
    return report


def _check_outputs(args) -> None:
    """The --save-model folder, --report file and --save-patch files can be written (core/paths.py), said before
    the edit runs: nothing a user made is replaced without --overwrite."""
    from pathlib import Path

    from ..core.paths import new_file, new_folder

    if args.save_model:
        new_folder(args.save_model)
    if args.report:
        new_file(args.report, args.overwrite)
    if args.save_patch:
        patch = Path(args.save_patch).expanduser().with_suffix(".safetensors")
        taken = [str(f) for f in (patch, patch.with_suffix(".json")) if f.exists()]
        if taken and not args.overwrite:
            raise EditkitError(f"{' and '.join(taken)} already exist{'s' if len(taken) == 1 else ''}; give "
                               "another --save-patch name, or replace them with --overwrite")


def _command(args) -> str:
    """This run as one command line (files as they were named)."""
    from ..evaluation.html_report import command_line

    words = ["edit", "--model", args.model, "--method", args.method, "--requests", args.requests]
    optional = [("--n", args.n), ("--dtype", args.dtype), ("--hparams", args.hparams)]
    words += [w for flag, value in optional if value is not None for w in (flag, str(value))]
    return command_line(words + ["--report", args.report])


def show(report):
    print(f"{report.method} on {report.model}: {round(report.result.seconds, 2)} s")
    for r in report.requests:
        print(f"- {r.rewrite!r}: {r.target_true!r} -> {r.target_new!r}")
        for p in r.prompts():
            nan = float("nan")
            true = (f"  p_true {nan if p.p_true_pre is None else p.p_true_pre:.3f} -> "
                    f"{nan if p.p_true_post is None else p.p_true_post:.3f}")
            print(f"  [{p.group}] p_new {p.p_new_pre:.3f} -> {p.p_new_post:.3f}{true}  {p.prompt[:60]!r}")
    for d in report.result.diagnostics:  # a rewrite it does not win, an implication it could not write
        print(f"note: {d}")
