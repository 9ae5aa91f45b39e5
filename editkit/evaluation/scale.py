"""How an evaluation scales over Ray workers: `python -m editkit bench scale [--records 20] [--workers 1,2]`.

The same evaluation (the first `records` records of a set, one method at batch 1, its statistics and templates
computed before any timing) runs in this process and then with each number of workers on a local Ray cluster
(local:N, started afresh for each), every run in a fresh results folder, so nothing is resumed. Per configuration:
the fixed costs (starting the cluster; starting the workers, each importing torch and loading the model), the
run's seconds per record (pre-edit measurement, edit and post-edit measurement, spread over the workers), the
speed-up over the in-process run and whether the results equal it. The report names what bounds the speed-up
(workers against free cores, rounds of items per worker) and projects a 1,000-record evaluation on N workers from
the measured costs. Measured numbers go in the manual (docs/results/speed.md, "Scaling on Ray").
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass

import torch

from ..core.errors import EditkitError
from ..editing.defaults import load_hparams
from ..runtime import cluster
from .evaluate import evaluate
from .measure import EvalSpec, wikitext_idf

TIMING = ("seconds_per_request", "results_file")
PROJECT_RECORDS = 1000
PROJECT_WORKERS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class ScaleSpec:
    """What `bench scale` runs: the first `records` records of `set_name`, `method` at batch 1 with its default
    hyperparameters, the evaluation's generation settings, in process (`threads` torch threads; each worker runs
    one) and with each count in `workers`."""

    records: int = 20
    workers: tuple[int, ...] = (1, 2)
    method: str = "rome"
    set_name: str = "counterfact"
    n_gen: int = 1
    gen_tokens: int = 40
    greedy_tokens: int = 12
    threads: int = 1

    def check(self) -> None:
        if self.records < 1 or not self.workers or any(w < 1 for w in self.workers) or self.threads < 1:
            raise EditkitError("--records, --threads and every count of --workers must be at least 1")


def _tables(out) -> dict:
    """The evaluation's numbers without timings and file names (what must equal across configurations)."""
    return {m: {k: v for k, v in t.items() if k not in TIMING} for m, t in out.methods.items()}


def _load() -> list[float]:
    return [round(x, 1) for x in os.getloadavg()]


def _evaluate(lm, spec: ScaleSpec, backend=None) -> tuple[dict, float]:
    es = EvalSpec(set_name=spec.set_name, n=spec.records, batch=1, n_gen=spec.n_gen, gen_tokens=spec.gen_tokens,
                  greedy_tokens=spec.greedy_tokens)
    with tempfile.TemporaryDirectory(prefix="editkit-scale-") as out_dir:
        t0 = time.perf_counter()
        out = evaluate(lm, [spec.method], es, out_dir=out_dir, backend=backend)
        return out, time.perf_counter() - t0


def bench_scale(lm, spec: ScaleSpec = ScaleSpec(), say=None) -> dict:
    """Run the evaluation in process and on 1, 2, ... workers (module docstring); `say(row)` hears each row."""
    from ..editing.run import prepare_first_use

    spec.check()
    say = say or (lambda row: None)
    t0 = time.perf_counter()
    # statistics and templates: in the cache for every configuration
    prepare_first_use(lm, load_hparams(spec.method, lm))
    wikitext_idf()
    prepare_s = time.perf_counter() - t0
    before = torch.get_num_threads()
    torch.set_num_threads(spec.threads)
    try:
        load = _load()
        serial, run_s = _evaluate(lm, spec)
    finally:
        torch.set_num_threads(before)
    base = run_s / spec.records
    rows = [{"config": "in process", "workers": 0, "threads": spec.threads, "run_s": round(run_s, 1),
             "seconds_per_record": round(base, 2), "speedup": 1.0, "equal": True, "load_average": load}]
    say(rows[-1])
    for n in spec.workers:
        backend = cluster.parse_backend(f"local:{n}")
        load = _load()
        try:
            t0 = time.perf_counter()
            cluster.connect(backend)
            t1 = time.perf_counter()
            info = cluster.start_workers(lm.name, backend)
            t2 = time.perf_counter()
            out, run_s = _evaluate(lm, spec, backend)
        finally:
            cluster.shutdown()
        rows.append({"config": f"{n} worker{'s' if n > 1 else ''}", "workers": n, "threads": 1,
                     "cluster_start_s": round(t1 - t0, 1), "workers_start_s": round(t2 - t1, 1),
                     "run_s": round(run_s, 1), "seconds_per_record": round(run_s / spec.records, 2),
                     "speedup": round(base / (run_s / spec.records), 2), "equal": _tables(out) == _tables(serial),
                     "worker_load_s": [w["load_s"] for w in info], "worker_rss_mb": [w["rss_mb"] for w in info],
                     "load_average": load})
        say(rows[-1])
    return {"model": lm.name, "spec": {**asdict(spec), "workers": list(spec.workers)}, "cpus": os.cpu_count(),
            "prepare_s": round(prepare_s, 1), "results": rows, "bound": bound(rows, spec.records),
            "projection": projection(rows)}


def bound(rows: list[dict], records: int) -> list[str]:
    """What limits each Ray configuration's speed-up, in words: workers against the cores not busy with other
    work, and the rounds of items (the last round runs part-empty)."""
    cpus = os.cpu_count() or 1
    out = []
    for r in rows:
        n = r["workers"]
        if not n:
            continue
        free = max(cpus - r["load_average"][0], 0.0)
        rounds = math.ceil(records / n)
        why = [f"{n} worker(s) and the driver on {cpus} cores"
               + (f" with a load average of {r['load_average'][0]:g} from other work (about {free:.1f} cores free)"
                  if r["load_average"][0] >= 0.5 else "")]
        if rounds * n > records:
            why.append(f"{records} records in {rounds} rounds of {n} (the last one part-empty: at most "
                       f"{records / rounds:.1f}x)")
        out.append(f"{r['config']}: speed-up {r['speedup']:g}x, bounded by " + "; ".join(why))
    return out


def projection(rows: list[dict], records: int = PROJECT_RECORDS) -> dict:
    """Seconds for a `records`-record evaluation on N workers (one core each, on as many machines as needed):
    the 1-worker per-record cost x records / N, plus the measured fixed costs (cluster and worker start). An
    estimate that assumes per-record costs stay as measured (no shared cores) and balanced rounds."""
    one = next((r for r in rows if r["workers"] == 1), None)
    if one is None:
        return {}
    fixed = one["cluster_start_s"] + one["workers_start_s"]
    return {"records": records, "seconds_per_record": one["seconds_per_record"], "fixed_s": round(fixed, 1),
            "seconds": {n: round(fixed + one["seconds_per_record"] * math.ceil(records / n), 0)
                        for n in PROJECT_WORKERS}}
