"""The LM head's product for a few rows, x W^T against W x^T, at the embedded model's head shape (262,144 x 640,
float32): why Runner.logits and a generation's steps put the weight on the left up to vocab.HEAD_BY_ROWS rows.

    python benchmarks/head_rows.py [--rows 3,8,16,32,64,128,256,512]

Best of 5 calls after one warm-up, per row count; one JSON line each.
"""
from __future__ import annotations

import argparse
import json
import timeit

import torch


def best(fn, repeat: int = 5) -> float:
    fn()  # warm-up
    return min(timeit.repeat(fn, number=1, repeat=repeat))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", default="3,8,16,32,64,128,256,512")
    p.add_argument("--vocab", type=int, default=262144)
    p.add_argument("--d", type=int, default=640)
    args = p.parse_args()
    torch.manual_seed(0)
    W = torch.randn(args.vocab, args.d) * 0.02
    for rows in (int(r) for r in args.rows.split(",")):
        x = torch.randn(rows, args.d)
        left = best(lambda: torch.nn.functional.linear(x, W))
        right = best(lambda: torch.mm(W, x.T).T.contiguous())
        print(json.dumps({"rows": rows, "x_Wt_ms": round(1000 * left, 1), "W_xt_ms": round(1000 * right, 1),
                          "ratio": round(left / right, 2), "threads": torch.get_num_threads()}), flush=True)


if __name__ == "__main__":
    main()
