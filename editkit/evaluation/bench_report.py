"""`python -m editkit bench report`: the headline speed measurements in one process on one machine, written as a
markdown report with the machine, its threads and load average, each goal against its measurement, and ratios
against references measured in the same run.

Sections (each can be skipped; ReportSpec):
- tracing (tracing/bench.py): the three exact panels of the benchmark prompt, one by one as the page streams them,
  and severing; the fast mode (bf16) with its largest score difference on the prompt; ROME's algorithm on the
  panels `reference_kinds` (kmeng01/rome's logits at every position) for the speed-up;
- edits (editing/bench.py): every registered method on one request (Darrieux) and the batch methods on 10, with the
  target optimisation's steps, and ROME's optimisation on the full model for the fast path's speed-up;
- lesson: one new fact built into a new pack with the pack's default settings and the shipped pack's methods, on a
  fresh cache that keeps the model's statistics, templates and weights (a teacher adding a fact: nothing of this
  fact is cached), per part (lesson/build.py's profile); the statistics the build needs are prepared first and
  timed apart;
- the lesson under load: the same new fact while every core also runs a busy loop, built as the Lesson page's "add
  a fact" job runs it (runtime/jobs.py, the teacher's normal priority): once beside loops at normal priority (other
  work on the machine), once beside loops at the lowest (nice 19) in a session of their own (a long background run
  started from another terminal);
- first use: a fresh cache that keeps only the converted weights: the first ROME, MEMIT and AlphaEdit edits
  (statistics, templates, factors, null spaces) and the first lesson fact (the layer sweep's statistics of every
  layer, the noise scale);
- lesson steps: the Lesson page's script runs (open a step, then reveal it) on the shipped pack, measured by
  benchmarks/lesson_steps.py in a child process (Streamlit's AppTest: the page, not the library; skipped outside a
  checkout).
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.cache import overlay
from ..core.paths import ROOT
from ..core.threads import spin_count

GOALS = {"lesson_fact_s": 90.0, "lesson_page_loaded_s": 180.0, "three_panels_s": 10.0, "one_request_edit_s": 5.0}
WARM = ("models", "gguf", "wheels", "stats", "templates", "hparams", "facts", "tracing/sigma")  # statistics cached
FRESH = ("models", "gguf", "wheels")  # a fresh cache but the converted weights
FACT = {"case_id": "bench-colosseum", "prompt": "{} is located in the city of", "subject": "The Colosseum",
        "target_true": "Rome", "target_new": "Paris",
        "paraphrase_prompts": ["The Colosseum can be found in the heart of",
                               "Tourists visiting the Colosseum travel to the city of"],
        "neighborhood_prompts": ["The Trevi Fountain is located in the city of",
                                 "The Pantheon is located in the city of"]}


@dataclass(frozen=True)
class ReportSpec:
    """What the report measures: every section unless skipped; ROME's algorithm on `reference_kinds` only (a panel
    of it takes over a minute)."""

    tracing: bool = True
    reference_kinds: tuple = ("hidden",)
    edits: bool = True
    lesson: bool = True
    lesson_under_load: bool = True
    steps: bool = True
    first_use: bool = True


def machine() -> dict:
    """The machine and its state now (a timing means little without the load it was taken at)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "vector": torch.backends.cpu.get_cpu_capability(),  # AVX2 / AVX512: which kernels torch runs
            "gomp_spincount": spin_count(),  # core/threads.py
            "python": platform.python_version(), "load_average": [round(x, 2) for x in os.getloadavg()],
            "date": time.strftime("%Y-%m-%d %H:%M")}


def bench_report(lm, spec: ReportSpec = ReportSpec(), say=print) -> dict:
    """Every section of `spec` in this process (module docstring); a JSON-serializable report."""
    from ..lesson.pack import editkit_version

    out = {"model": lm.name, "editkit": editkit_version(), "machine": machine(), "spec": spec.__dict__}
    if spec.tracing:
        out["tracing"] = _tracing(lm, spec, say)
    if spec.edits:
        from ..editing.bench import bench_edit

        out["edits"] = bench_edit(lm, n=10, reference=True, say=say)
    if spec.lesson:
        out["lesson"] = _lesson(lm, WARM, say)
    if spec.lesson_under_load:
        out["lesson_under_load"] = _lesson_under_load(lm, say, niceness=0)
        out["lesson_beside_background"] = _lesson_under_load(lm, say, niceness=19)
    if spec.steps:
        out["steps"] = _steps(say)
    if spec.first_use:
        out["first_use"] = _first_use(lm, say)
    out["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    out["goals"] = goals(out)
    return out


def _tracing(lm, spec: ReportSpec, say) -> dict:
    from ..tracing.bench import bench_trace

    return bench_trace(lm, "The Space Needle is in downtown", "Space Needle", last_only=False,
                       reference=tuple(spec.reference_kinds), facts=0, say=say)


def _lesson(lm, keep: tuple, say) -> dict:
    """One new fact built into a new pack on a cache overlay that keeps `keep` (module docstring)."""
    from ..editing.defaults import load_hparams
    from ..editing.run import prepare_first_use
    from ..lesson import compute
    from ..lesson.build import build
    from ..lesson.pack import SHIPPED, read_json

    methods = (read_json(SHIPPED / "manifest.json") or {}).get("method_names")
    with overlay(keep), tempfile.TemporaryDirectory(prefix="editkit-pack-") as tmp:
        t0 = time.perf_counter()
        layers = list(range(lm.adapter.n_layers))
        with compute.session(lm):  # the layer sweep's statistics: cached, as after a machine's first pack
            prepare_first_use(lm, [load_hparams("rome", lm, {"layers": [l]}) for l in layers])
        statistics_s = time.perf_counter() - t0
        (Path(tmp) / "fact.json").write_text(json.dumps([FACT]), encoding="utf-8")
        summary = build(Path(tmp) / "fact.json", Path(tmp) / "pack", lm=lm, methods=methods,
                        progress=lambda f, m: None)
    say({"lesson_fact_s": summary["seconds"], "statistics_s": round(statistics_s, 1)})
    return {"seconds": summary["seconds"], "statistics_s": round(statistics_s, 1), "methods": methods,
            "settings": compute.Settings().to_dict(), "parts": summary["profile"],
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def _lesson_under_load(lm, say, niceness: int = 0) -> dict:
    """`_lesson` as the page's teacher job runs it (jobs.run at the normal priority), while one busy loop per core
    runs beside it at `niceness`; low-priority loops in a session of their own, as a background run started from
    another terminal is (the kernel's autogroups share the CPU between sessions whatever the niceness)."""
    from ..runtime import jobs

    code = f"import os; os.nice({niceness})\nwhile True: pass"
    busy = [subprocess.Popen([sys.executable, "-c", code], start_new_session=niceness > 0)
            for _ in range(os.cpu_count() or 1)]
    try:
        job = jobs.Job("adding a fact to the lesson", niceness=0)
        out = jobs.run(job, lambda progress: _lesson(lm, WARM, say), queue=jobs.JobQueue(slots=1))
    finally:
        for p in busy:
            p.kill()
            p.wait()
    return {**out, "busy_loops": len(busy), "busy_niceness": niceness}


def _first_use(lm, say) -> dict:
    """The first edits and the first lesson fact on a fresh cache that keeps only the converted weights."""
    from ..editing.bench import DARRIEUX
    from ..editing.run import run_edit

    out = {}
    with overlay(FRESH):
        for method in ("rome", "memit", "alphaedit"):
            t0 = time.perf_counter()
            run_edit(lm, method, DARRIEUX)
            out[f"first_{method}_edit_s"] = round(time.perf_counter() - t0, 1)
            say({f"first_{method}_edit_s": out[f"first_{method}_edit_s"]})
    out["lesson"] = _lesson(lm, FRESH, say)  # a fresh cache of its own: statistics of every layer, templates, noise
    return out


def _steps(say) -> dict | None:
    """The Lesson page's step latency (benchmarks/lesson_steps.py in a child process), or None outside a checkout."""
    script = ROOT / "benchmarks" / "lesson_steps.py"
    if not script.exists():
        return None
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"}
    out = json.loads(done.stdout.strip().splitlines()[-1])
    say({"lesson_step_p50_s": out.get("p50_s"), "lesson_step_max_s": out.get("max_s")})
    return out


def goals(report: dict) -> list[dict]:
    """Each goal with its measurement: a new lesson fact, the three exact panels, the slowest one-request edit."""
    rows = []
    if report.get("lesson"):
        rows.append(_goal("a new fact in a lesson pack (statistics cached)", report["lesson"]["seconds"],
                          GOALS["lesson_fact_s"]))
    for key in ("lesson_under_load", "lesson_beside_background"):
        if report.get(key):
            r = report[key]
            rows.append(_goal(f"the same as the page's job, {r['busy_loops']} busy loops {_niceness(r)} beside it",
                              r["seconds"], GOALS["lesson_page_loaded_s"]))
    if report.get("tracing"):
        t = report["tracing"]
        rows.append(_goal("three exact panels (hidden, MLP, attention; float32)", t["three_panels_s"],
                          GOALS["three_panels_s"]))
        if t.get("bf16_three_panels_s") is not None:  # not timed where bf16 is slower (tracing/bench.py)
            rows.append(_goal("three panels in fast mode (bf16, an approximation)", t["bf16_three_panels_s"],
                              GOALS["three_panels_s"]))
    if report.get("edits"):
        one = [r for r in report["edits"]["results"] if r["requests"] == 1 and "reference" not in r["method"]]
        worst = max(one, key=lambda r: r["seconds"])
        rows.append(_goal(f"the slowest one-request edit ({worst['method']})", worst["seconds"],
                          GOALS["one_request_edit_s"]))
    return rows


def _goal(what: str, seconds: float, goal: float) -> dict:
    return {"goal": what, "seconds": seconds, "target_s": goal, "met": seconds < goal}


def to_markdown(r: dict) -> str:
    """The report as markdown: the machine, the goals, then each section's table."""
    m = r["machine"]
    lines = [f"# editkit benchmark report: {r['model']}", "",
             f"{m['cpu']} ({m.get('vector', '?')}), {m['cores']} cores; torch {m['torch']} with {m['threads']} "
             f"threads (OpenMP spin count "
             f"{m.get('gomp_spincount') or 'libgomp default'}); load average "
             f"(1, 5, 15 min) {m['load_average']} at the start, {r['load_average_end']} at the end; {m['date']}; "
             f"editkit {r['editkit']}.", "", "| goal | measured | target | |", "|---|---|---|---|"]
    lines += [f"| {g['goal']} | {g['seconds']:.1f} s | < {g['target_s']:.0f} s | {'met' if g['met'] else 'missed'} |"
              for g in r["goals"]]
    for section in (_md_tracing, _md_edits, _md_lesson, _md_steps, _md_first_use):
        lines += section(r)
    return "\n".join(lines) + "\n"


def _md_tracing(r: dict) -> list[str]:
    t = r.get("tracing")
    if not t:
        return []
    out = ["", "## Causal tracing", "", f"\"{t['prompt']}\" ({t['tokens']} tokens, {t['layers']} layers), "
           f"{t['samples']} noise samples, window 10. Setup (clean and corrupted runs) {t['setup_s']} s; matmul "
           f"rate now: blocks {t['block_matmul_gmac_per_s']} GMAC/s, unembedding {t['unembed_gmac_per_s']} GMAC/s.",
           "", "| panel | exact engine | blocks GMAC/s | unembedding GMAC/s | what bounds it | fast mode (bf16) | "
           "fast max abs diff | ROME's algorithm | speed-up |", "|---|---|---|---|---|---|---|---|---|"]
    for row in t["results"]:
        ref = f"{row['reference_s']} s | {row['ratio']}x" if "reference_s" in row else "- | -"
        fast = (f"{row['bf16_engine_s']} s | {row['bf16_max_abs_diff']:.4f}" if "bf16_engine_s" in row
                else "not run | -")
        out.append(f"| {row['kind']} | {row['engine_s']} s | {row['block_gmac_per_s']} | "
                   f"{row['unembed_gmac_per_s']} | {row['bound']} | {fast} | {ref} |")
    fast = (f"fast mode {t['bf16_three_panels_s']} s" if t.get("bf16_three_panels_s") is not None else
            "fast mode not run: it is off on this machine")
    out += ["", f"Three panels {t['three_panels_s']} s (setup once + the three, panel by panel), "
            f"{t['one_schedule_total_s']} s in one schedule with severing; severing {t['severing_s']} s; {fast}."]
    if t.get("bf16_rates"):
        out.append(f"Its {t['bf16_rates']}.")
    return out


def _md_edits(r: dict) -> list[str]:
    e = r.get("edits")
    if not e:
        return []
    out = ["", "## Edits", "", f"Statistics ready in {e['statistics_s']} s (cached before the runs). ROME's target "
           f"optimisation on the full model is {e.get('rome_speedup', '-')}x slower than the fast path.", "",
           "| method | requests | seconds | CPU s | steps | s / step | efficacy | generalization |",
           "|---|---|---|---|---|---|---|---|"]
    for row in e["results"]:
        out.append(f"| {row['method']} | {row['requests']} | {row['seconds']} | {row['cpu_seconds']} | {row['steps']} "
                   f"| {row['seconds_per_step']} | {row['efficacy']:.2f} | "
                   f"{'-' if row['generalization'] is None else format(row['generalization'], '.2f')} |")
    return out


def _md_lesson(r: dict) -> list[str]:
    out = []
    if r.get("lesson"):
        out += _md_parts(r["lesson"], "A new fact in a lesson pack (statistics cached)")
    for key in ("lesson_under_load", "lesson_beside_background"):
        if r.get(key):
            out += _md_parts(r[key], f"The same fact as the page's job, with a busy loop {_niceness(r[key])} on "
                                     "every core")
    return out


def _niceness(r: dict) -> str:
    """How the busy loops of an under-load measurement ran (a report saved before they had a niceness: 0)."""
    return "at the lowest priority (nice 19, own session)" if r.get("busy_niceness", 0) >= 19 else \
        "at normal priority"


def _md_parts(lesson: dict, title: str) -> list[str]:
    out = ["", f"## {title}", "", f"{lesson['seconds']} s for {len(lesson['parts'])} parts, methods "
           f"{', '.join(lesson['methods'] or [])}; the statistics of every layer {lesson['statistics_s']} s before "
           f"it (not counted); load average {lesson['load_average']} after it.", "",
           "| part | seconds | CPU s |", "|---|---|---|"]
    out += [f"| {p['part']} | {p['seconds']} | {p['cpu_seconds']} |" for p in lesson["parts"]]
    return out


def _md_steps(r: dict) -> list[str]:
    s = r.get("steps")
    if not s:
        return []
    if "error" in s:
        return ["", "## Lesson steps", "", f"Not measured: {s['error']}"]
    out = ["", "## Lesson steps (the page's script runs)", "", "| step | open s | reveal s |", "|---|---|---|"]
    out += [f"| {row['step']} | {row['open_s']} | {row['reveal_s']} |" for row in s["rows"]]
    return out + ["", f"median {s['p50_s']} s, slowest {s['max_s']} s per script run."]


def _md_first_use(r: dict) -> list[str]:
    f = r.get("first_use")
    if not f:
        return []
    out = ["", "## First use (a fresh cache with the converted weights)", "",
           f"The first ROME edit {f['first_rome_edit_s']} s, MEMIT's after it {f['first_memit_edit_s']} s, "
           f"AlphaEdit's after them {f['first_alphaedit_edit_s']} s."]
    return out + _md_parts(f["lesson"], "The first lesson fact on a fresh cache")
