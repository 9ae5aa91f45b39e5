"""OpenMP's spin at barriers against other work on the machine (editkit/core/threads.py sets GOMP_SPINCOUNT=10000).

    python benchmarks/spin.py                      # libgomp's default and 10000: idle, beside a nice-19 loop
    python benchmarks/spin.py --spins 300000,10000,1000,passive --loops 2 --niceness 0

Each configuration in a fresh process (libgomp reads the setting once, when torch loads it), torch's default
threads: the greedy continuation of three prompts (20 tokens: many small parallel regions) and the hidden-state
trace of the bench report's fact in fast mode (larger ones), on the embedded model. "passive" is OMP_WAIT_POLICY=
PASSIVE (no spin). Loads: idle; busy loops at --niceness started from this session; the same loops in a session of
their own (a job started from another terminal or by a service: with the kernel's autogroups on, the CPU is shared
between sessions first, and a niceness only orders the processes within one). One JSON line per configuration.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = """
import json, time
from editkit.evaluation.bench_report import FACT, WARM, overlay
from editkit.lesson import compute
from editkit.model.decoding import Decoding
lm = compute.load("gemma-3-270m")
r = compute.record_of(FACT).request
out = {}
with overlay(WARM):
    lm.runner.complete([r.rewrite], Decoding.greedy(2))
    t = time.perf_counter(); lm.runner.complete([r.rewrite] + r.paraphrase_prompts, Decoding.greedy(20))
    out["greedy_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    compute.traces(lm, r.rewrite, r.subject, r.target_true, compute.Settings(), kinds=("hidden",), sever=False)
    out["hidden_fast_s"] = round(time.perf_counter() - t, 2)
print(json.dumps(out))
"""


def run(spin: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update({"OMP_WAIT_POLICY": "PASSIVE"} if spin == "passive" else {"GOMP_SPINCOUNT": spin})
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--spins", default="300000,10000", help="GOMP_SPINCOUNT values (300000: libgomp's default), "
                                                          "or passive")
    p.add_argument("--loops", type=int, default=1, help="busy loops beside the loaded runs")
    p.add_argument("--niceness", type=int, default=19, help="the busy loops' niceness")
    p.add_argument("--loads", default="idle,this,own", help="which of idle, this (session), own (session)")
    p.add_argument("--rounds", type=int, default=1, help="every configuration this many times, interleaved")
    args = p.parse_args()
    loops = f"{args.loops} busy loop(s) at nice {args.niceness}"
    loads = {"idle": ("idle", None), "this": (f"{loops}, this session", False),
             "own": (f"{loops}, their own session", True)}  # name: (label, own session; None: no loops)
    for load, own in [loads[x.strip()] for x in args.loads.split(",")]:
        code = f"import os; os.nice({args.niceness})\nwhile True: pass"
        busy = [] if own is None else [subprocess.Popen([sys.executable, "-c", code], start_new_session=own)
                                       for _ in range(args.loops)]
        try:
            for spin in [v for _ in range(args.rounds) for v in args.spins.split(",")]:
                print(json.dumps({"load": load, "spin": spin, **run(spin)}), flush=True)
        finally:
            for b in busy:
                b.kill()
                b.wait()


if __name__ == "__main__":
    main()
