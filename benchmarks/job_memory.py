"""The working memory a long job declares (what a served app's queue admits within its budget) against the peak it
really adds over the loaded model: one fresh process per job, the peak resident memory (VmHWM, reset just before the
job through /proc/self/clear_refs) minus the resident memory before it. One JSON line per job:

    python benchmarks/job_memory.py --model gemma-3-270m                       # every job below
    python benchmarks/job_memory.py --model gemma-3-270m --jobs trace:2 edit:rome

Jobs: trace:N (the Causal tracing page's trace: preview, the three exact panels and severing, N noise samples, a
short fact), longtrace:N (the same over a 30-token prompt), aie:N (the average indirect effect over N facts), edit:M
(method M's edit of one fact, its statistics already cached) and lesson (adding a fact to a lesson pack). An
estimate holds when `ratio` (measured / declared) is at most 1. Linux only; runs at one thread (memory does not
depend on it), so it is slow but not disturbed by a loaded machine.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FACT = ("The Eiffel Tower is located in the city of", "The Eiffel Tower")
LONG = ("The Space Needle, a tall observation tower built for the 1962 World's Fair in the city of Seattle, "
        "Washington, is located in the city of", "The Space Needle")
REQUEST = {"prompt": "{} is located in the city of", "subject": "The Eiffel Tower", "target_new": " Rome"}
DEFAULT_JOBS = ["trace:2", "trace:10", "trace:50", "longtrace:10", "aie:5", "edit:rome", "edit:memit",
                "edit:alphaedit"]


def _status(key: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    raise RuntimeError(key)


def one(model: str, job: str) -> dict:
    """Run `job` in this process on a freshly loaded `model`: {"job", "declared_mb", "peak_mb", "ratio", ...}."""
    import torch

    torch.set_num_threads(1)
    from editkit.model.loading import load_model
    from editkit.model.text import top_k

    lm = load_model(model, device="cpu")
    top_k(lm, FACT[0], 5)  # the first forward's one-time allocations are not the job's
    kind, _, arg = job.partition(":")
    warm, fn, declared = _job(lm, kind, arg)
    warm()  # a small job of the same kind first: the modules it imports and one-time caches are not the job's
    base = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    start = time.time()
    fn()
    peak = _status("VmHWM") - base
    return {"model": model, "job": job, "declared_mb": round(declared / 1e6), "peak_mb": round(peak * 1.048576),
            "ratio": round(peak * 1.048576e6 / declared, 2), "seconds": round(time.time() - start, 1)}


def _job(lm, kind: str, arg: str):
    """(a small warm-up of the same kind, the computation, its declared bytes)."""
    from editkit.tracing import Tracer, TraceSpec
    from editkit.tracing.ram import aie_ram, trace_ram

    if kind in ("trace", "longtrace"):
        prompt, subject = FACT if kind == "trace" else LONG
        tracer = Tracer(lm, TraceSpec(prompt, subject, None, int(arg)), cache=False)

        def run(tracer=tracer):
            tracer.preview(["hidden", "mlp", "attn"])
            for k in ("hidden", "mlp", "attn"):
                tracer.result(k)
            tracer.severing()
        small = Tracer(lm, TraceSpec("Paris is the capital of", "Paris", None, 1), cache=False)
        return (lambda: run(small)), run, trace_ram(lm, prompt, int(arg))
    if kind == "aie":
        from editkit.tracing.aie import average_indirect_effect

        return (lambda: average_indirect_effect(lm, 1, samples=1, cache=False)), \
            (lambda: average_indirect_effect(lm, int(arg), cache=False)), aie_ram(lm)
    if kind == "edit":
        from editkit.editing.defaults import load_hparams
        from editkit.editing.ram import edit_ram
        from editkit.editing.run import prepare_first_use, run_edit

        def warm():  # the statistics and context templates (cached on disk), the method's modules
            prepare_first_use(lm, load_hparams(arg, lm), None, arg)
            run_edit(lm, arg, [dict(REQUEST, subject="The Louvre", target_new=" Berlin")])
        return warm, (lambda: run_edit(lm, arg, [REQUEST])), edit_ram(lm, [arg])
    if kind == "lesson":
        import tempfile

        from editkit.lesson import compute
        from editkit.lesson.build import build

        record = dict(REQUEST, prompt=REQUEST["prompt"], target_true=" Paris", target_new="Rome",
                      paraphrase_prompts=["The Eiffel Tower, a landmark in the city of"],
                      neighborhood_prompts=["The Louvre is located in the city of"])
        folder = Path(tempfile.mkdtemp()) / "pack"
        return (lambda: None), (lambda: build([record], folder, lm=lm)), compute.build_ram(lm, compute.Settings())
    raise SystemExit(f"unknown job {kind!r}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--jobs", nargs="+", default=DEFAULT_JOBS)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # the child process's job
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.model, args.one)), flush=True)
        return 0
    ok = True
    for job in args.jobs:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
        out = subprocess.run([sys.executable, __file__, "--model", args.model, "--one", job], env=env,
                             capture_output=True, text=True)
        line = (out.stdout.strip().splitlines() or [""])[-1]
        if out.returncode or not line.startswith("{"):
            print(json.dumps({"model": args.model, "job": job, "error": out.stderr.strip()[-500:]}), flush=True)
            ok = False
            continue
        print(line, flush=True)
        ok = ok and json.loads(line)["ratio"] <= 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
