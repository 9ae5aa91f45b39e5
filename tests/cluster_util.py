"""A tiny-model workload for the fan-out layer (editkit/runtime/cluster.py), and its per-item cost with 1 and 2 workers.

    python tests/cluster_util.py --model tiny-gpt2 --records 12     # prints a JSON report

Each item edits one CounterFact validation record with ROME (today's editing API) and returns P(new) and P(true)
on its prompt before and after the edit: what an evaluation does per record, in small.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from editkit.core.paths import DATA  # noqa: E402
from editkit.runtime import cluster  # noqa: E402

STEPS = {"v_num_grad_steps": 3}


def requests(n: int) -> list[dict]:
    """The first n CounterFact validation records as edit requests."""
    rows = json.loads((DATA / "counterfact" / "counterfact-val.json").read_text())[:n]
    return [{"prompt": r["prompt"], "subject": r["subject"], "target_new": r["target_new"],
             "target_true": r["ground_truth"]} for r in rows]


def probabilities(lm, request: dict) -> list[float]:
    from editkit.model.scoring import score_targets

    prompts = [request["prompt"]] * 2
    return [s.logprob for s in score_targets(lm, prompts, [" " + request["target_new"], " " + request["target_true"]])]


def edit_record(lm, request: dict, log: str | None = None, shared: dict | None = None,
                hparams: dict | None = None) -> dict:
    """ROME on one request; log-probabilities of the new and true targets before and after (and, given `shared`,
    a value read from it, to show it arrived). `log`: a file that gets one line per execution."""
    from editkit.editing.run import run_edit
    from editkit.model.weights import applied

    if log:
        with open(log, "a") as f:
            f.write(request["subject"] + "\n")
    result = run_edit(lm, "rome", [request], (shared or {}).get("hparams", STEPS if hparams is None else hparams))
    with applied(lm, result.delta):
        post = probabilities(lm, request)
    out = {"pre": probabilities(lm, request), "post": post,
           "norms": {k: float(v.norm()) for k, v in result.delta.items()}}
    if shared is not None:
        out["shared"] = float(shared["noise"].sum())
    return out


def die_once(lm, request: dict, marker: str, log: str | None = None) -> dict:
    """edit_record, but the first execution kills its own process halfway (a worker lost mid-item)."""
    if not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()))
        probabilities(lm, request)  # some work in flight
        os._exit(1)
    return edit_record(lm, request, log)


def stepper(lm, steps: int, seconds: float, progress) -> int:
    """Reports its own progress, `steps` steps of `seconds` each (no model work)."""
    for k in range(steps):
        progress(k / steps, f"step {k + 1} of {steps}")
        time.sleep(seconds)
    return steps


def items(reqs: list[dict], **kwargs) -> list[cluster.Item]:
    return [cluster.Item(edit_record, (r,), dict(kwargs), label=r["subject"]) for r in reqs]


def measure(model: str, n: int, workers: tuple[int, ...] = (1, 2), hparams: dict | None = None) -> dict:
    """Seconds per item in process and with 1 and 2 Ray workers (each in a fresh local cluster), and the fixed
    costs: connecting (starting the local cluster) and starting the workers (model loaded once each)."""
    from editkit.model.loading import load_model

    lm = load_model(model, device="cpu")
    reqs = requests(n)
    run = items(reqs, hparams=hparams)
    cluster.run_items(lm, run[:1])  # warm: statistics and templates in the cache, as for the workers
    t0 = time.perf_counter()
    serial = cluster.run_items(lm, run)
    report = {"model": model, "items": n, "hparams": STEPS if hparams is None else hparams,
              "cpus": os.cpu_count(),
              "load_average": [round(x, 1) for x in os.getloadavg()],
              "in_process": {"seconds_per_item": round((time.perf_counter() - t0) / n, 3)}}
    for w in workers:
        backend = cluster.parse_backend(f"local:{w}")
        t0 = time.perf_counter()
        cluster.connect(backend)
        t1 = time.perf_counter()
        info = cluster.start_workers(lm.name, backend)
        t2 = time.perf_counter()
        out = cluster.run_items(lm, run, backend)
        t3 = time.perf_counter()
        cluster.shutdown()
        report[f"ray_{w}"] = {"connect_s": round(t1 - t0, 2), "workers_start_s": round(t2 - t1, 2),
                              "run_s": round(t3 - t2, 2), "seconds_per_item": round((t3 - t2) / n, 3),
                              "equal_to_in_process": out == serial, "workers": info,
                              "load_average": [round(x, 1) for x in os.getloadavg()]}
    return report


def same(a, b, ignore: frozenset | set = frozenset()) -> bool:
    """a == b for JSON-like results, recursively, skipping the dict keys in `ignore` (what a run may differ in:
    timings, file names, cache labels)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return all(same(a.get(k), b.get(k), ignore) for k in (set(a) | set(b)) - set(ignore))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y, ignore) for x, y in zip(a, b))
    return a == b


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-gpt2")
    parser.add_argument("--records", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the in-process run")
    parser.add_argument("--hparams", type=json.loads, default=None, help='ROME overrides (JSON); default '
                        f'{json.dumps(STEPS)}; {{}} for the model\'s defaults')
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    print(json.dumps(measure(args.model, args.records, hparams=args.hparams), indent=1))

