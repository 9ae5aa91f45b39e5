"""Causal tracing speed: the fast engine against the reference algorithm (ROME's), the same noise, in one run."""
from __future__ import annotations

import time


def bench_trace(lm, prompt: str, subject: str, kinds=("hidden", "mlp", "attn"), samples: int = 10,
                last_only: bool = False, say=print) -> dict:
    """Per kind: the reference's and the fast engine's seconds (the fast time includes the shared clean and
    corrupted runs), their ratio and the largest score difference."""
    from . import fast_trace, prepare, reference_trace

    t0 = time.perf_counter()
    setup = prepare(lm, prompt, subject, samples=samples)
    setup_s = time.perf_counter() - t0
    rows = []
    for kind in kinds:
        t0 = time.perf_counter()
        fast = fast_trace(lm, setup, kind)
        fast_s = time.perf_counter() - t0 + setup_s
        t0 = time.perf_counter()
        ref = reference_trace(lm, setup, kind)
        ref_s = time.perf_counter() - t0
        row = {"kind": kind, "reference_s": round(ref_s, 2), "fast_s": round(fast_s, 2),
               "ratio": round(ref_s / fast_s, 2), "max_abs_diff": float((fast - ref).abs().max())}
        if last_only:
            t0 = time.perf_counter()
            last = reference_trace(lm, setup, kind, last_only=True)
            last_s = time.perf_counter() - t0
            row.update(reference_last_only_s=round(last_s, 2), ratio_last_only=round(last_s / fast_s, 2),
                       max_abs_diff_last_only=float((fast - last).abs().max()))
        rows.append(row)
        say(row)
    return {"model": lm.name, "prompt": prompt, "subject": subject, "samples": samples, "setup_s": round(setup_s, 2),
            "tokens": len(setup.tokens), "layers": lm.adapter.n_layers, "results": rows}
