"""`python -m editkit lesson build --facts FILE --out DIR [--model M] [--methods rome,memit,...] [--ray ...]`:
compute a class pack for the Lesson page (every result its steps show, per fact; resumable; with --ray one work item
per part on a Ray cluster); `lesson show DIR`: what a pack holds."""
import sys
import time

from ..core.errors import EditkitError
from .common import add_ray_arg, ray_backend


def register(sub):
    p = sub.add_parser("lesson", help="build a class pack for the Lesson page, or show one")
    actions = p.add_subparsers(dest="action", required=True)
    b = actions.add_parser("build", help="compute every result of the lesson for each fact of a facts file")
    b.add_argument("--facts", required=True, help="a .json / .jsonl file of requests (editkit JSON, CounterFact or "
                                                  "EasyEdit records; editkit's may add \"lesson_targets\")")
    b.add_argument("--out", required=True, help="the pack folder (created; a rerun resumes or adds facts)")
    b.add_argument("--model", default=None, help="model name, hub id or folder (default: the pack's model, else "
                                                 "gemma-3-270m)")
    b.add_argument("--methods", default=None, help="comma-separated methods, rome first (default: every "
                                                   "registered method)")
    b.add_argument("--samples", type=int, default=10, help="noise samples per causal trace (10)")
    b.add_argument("--bleed-facts", type=int, default=12, help="known facts of the same relation in the bleed map")
    b.add_argument("--sweep-layers", default="all", help="layers of the layer sweep: 'all', '2,4,6' or '0-17'")
    b.add_argument("--exact-traces", action="store_true",
                   help="trace each fact with the exact engine (float32) instead of its fast mode (bf16, an "
                        "approximation shown with its measured bound): as packs built before it")
    b.add_argument("--exact-retraces", action="store_true",
                   help="re-trace the edited models with the exact engine (float32) instead of its fast mode")
    b.add_argument("--retrace-samples", type=int, default=None,
                   help="noise samples of the re-traces (default 5, the first of the fact's own; as packs built "
                        "before it: --retrace-samples 10)")
    b.add_argument("--keep-statistics", action="store_true",
                   help="copy the model's statistics into the pack (hundreds of MB on Gemma), so that the pack "
                        "moved to another machine adds facts without computing them first")
    b.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_ray_arg(b)
    b.set_defaults(func=build, show=show_build)
    s = actions.add_parser("show", help="the facts and parts of a pack")
    s.add_argument("folder", help="the pack folder")
    s.add_argument("--json", action="store_true", help="print as JSON")
    s.set_defaults(func=show_pack, show=print_pack)


class Bar:
    """A progress bar on stderr: percentage, the part being computed and the time left. On a terminal one line is
    redrawn; in a log a line is written when the part changes, or every 10 s."""

    def __init__(self, stream=None):
        self.stream, self.last, self.part, self.at = stream or sys.stderr, "", None, 0.0

    def __call__(self, fraction: float, message: str) -> None:
        filled = int(30 * fraction)
        line = f"[{'#' * filled}{'.' * (30 - filled)}] {100 * fraction:5.1f}% {message}"
        if self.stream.isatty():
            if line != self.last:
                self.stream.write("\r\x1b[K" + line[:200])
                self.stream.flush()
                self.last = line
            return
        part, now = message.split(":")[0], time.monotonic()
        if part != self.part or now - self.at >= 10 or fraction >= 1:
            self.stream.write(line[:300] + "\n")
            self.stream.flush()
            self.part, self.at = part, now

    def close(self) -> None:
        if self.stream.isatty():
            self.stream.write("\n")


def build(args):
    from ..lesson import compute
    from ..lesson.build import build as build_pack

    if args.samples < 1:
        raise EditkitError("--samples must be at least 1")
    if args.bleed_facts < 0:
        raise EditkitError("--bleed-facts cannot be negative")
    if args.retrace_samples is not None and not 1 <= args.retrace_samples <= args.samples:
        raise EditkitError(f"--retrace-samples must be between 1 and --samples ({args.samples}): the re-traces "
                           "use the first of the fact's own noise draws")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None
    default = compute.Settings()
    settings = compute.Settings(samples=args.samples, bleed_facts=args.bleed_facts, sweep_layers=args.sweep_layers,
                                trace_precision="float32" if args.exact_traces else default.trace_precision,
                                retrace_precision="float32" if args.exact_retraces else default.retrace_precision,
                                retrace_samples=args.retrace_samples or default.retrace_samples)
    bar = Bar()
    try:
        return build_pack(args.facts, args.out, args.model, methods, settings, progress=bar,
                          backend=ray_backend(args), keep_statistics=args.keep_statistics)
    finally:
        bar.close()


def show_build(out):
    print(f"pack {out['pack']} on {out['model']}: {len(out['facts'])} fact(s) ({', '.join(out['facts'])}); "
          f"{out['computed']} part(s) computed, {out['skipped']} already there; {out['seconds']:.0f} s; "
          f"{out['bytes'] / 1024:.0f} KiB")
    for p in out.get("profile", []):
        first = f", {p['statistics_seconds']:.1f} s of it first-use statistics" if p.get("statistics_seconds") else ""
        print(f"  {p['seconds']:7.1f} s  ({p['cpu_seconds']:7.1f} CPU s{first})  {p['fact']}: {p['part']}")
    for fid, at in (out.get("opened") or {}).items():  # a fact is served step by step while it is built
        steps = ", ".join(f"{n} at {at[n]:.0f} s" for n in range(1, 12) if n in at)
        print(f"  {fid}: served to students from {at['visible']:.0f} s (steps 1-3); steps opened: {steps}")
    if out.get("restored"):
        print(f"restored {len(out['restored'])} statistics file(s) the pack carries into this machine's cache")
    print(f"serve it: EDITKIT_LESSON={out['pack']} streamlit run app.py")


def show_pack(args):
    from ..lesson.pack import Pack

    pack = Pack.open(args.folder)
    facts = []
    for fid in pack.fact_ids:
        f = pack.fact(fid)
        r = f["request"]
        facts.append({"id": fid, "fact": r["prompt"].replace("{}", r["subject"]) + " " + r["target_true"].strip(),
                      "targets": [t.strip() for t in f["targets"]], "missing": pack.missing(fid)})
    m = pack.manifest
    return {"pack": str(pack.folder), "model": m["model"], "fingerprint": m["fingerprint"],
            "editkit_version": m.get("editkit_version"), "settings": m.get("settings"), "facts": facts,
            "bytes": pack.size()}


def print_pack(out):
    print(f"pack {out['pack']} on {out['model']} (weights {out['fingerprint']}, {out['editkit_version']}), "
          f"{out['bytes'] / 1024:.0f} KiB")
    for f in out["facts"]:
        missing = f"; missing: {', '.join(f['missing'])}" if f["missing"] else ""
        print(f"  {f['id']}: {f['fact']} -> {', '.join(f['targets'])}{missing}")
