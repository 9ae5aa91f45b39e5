"""Matmul rates in float32, bfloat16 and float16 at the tracing engine's shapes on this CPU: whether half precision
is the fast path or the slow one here (model/hardware.py decides the same with a smaller product).

    python benchmarks/matmul_dtypes.py [--shapes 512x640x2048,50x640x262144]

The best of 3-20 timed products after a warm-up (model/hardware.py's probe at these shapes); one JSON line per dtype and
shape.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from editkit.model.hardware import measure_rate  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", default="512x640x2048,50x640x262144", help="m x k x n products")
    p.add_argument("--dtypes", default="float32,bfloat16,float16")
    args = p.parse_args()
    print(json.dumps({"vector": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}))
    for shape in args.shapes.split(","):
        m, k, n = (int(x) for x in shape.split("x"))
        for name in args.dtypes.split(","):
            gmacs = measure_rate(getattr(torch, name), "cpu", (m, k, n))
            print(json.dumps({"shape": shape, "dtype": name, "gmac_per_s": round(gmacs, 2)}), flush=True)


if __name__ == "__main__":
    main()
