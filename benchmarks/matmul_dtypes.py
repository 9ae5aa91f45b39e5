"""Matmul rates in float32, bfloat16 and float16 at the tracing engine's shapes on this CPU: whether half precision
is the fast path or the slow one here (model/hardware.py decides the same with a smaller product).

    python benchmarks/matmul_dtypes.py [--shapes 512x640x2048,50x640x262144]

Best of 3 timed products after a warm-up (about 2 GMAC each, at least one product); one JSON line per dtype and shape.
"""
from __future__ import annotations

import argparse
import json
import time

import torch


def rate(m: int, k: int, n: int, dtype: torch.dtype) -> float:
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    a @ b
    reps = max(1, int(2e9 / (m * k * n)))
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = min(best, (time.perf_counter() - t) / reps)
    return m * k * n / best / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="512x640x2048,50x640x262144", help="m x k x n products")
    p.add_argument("--dtypes", default="float32,bfloat16,float16")
    args = p.parse_args()
    print(json.dumps({"vector": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}))
    for shape in args.shapes.split(","):
        m, k, n = (int(x) for x in shape.split("x"))
        for name in args.dtypes.split(","):
            gmacs = rate(m, k, n, getattr(torch, name))
            print(json.dumps({"shape": shape, "dtype": name, "gmac_per_s": round(gmacs, 2)}), flush=True)


if __name__ == "__main__":
    main()
