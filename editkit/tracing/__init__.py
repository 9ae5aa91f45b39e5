"""Causal tracing (Meng et al. 2022): where in the network does the model recall a fact?

    results = trace(lm, "The Space Needle is in downtown", "Space Needle", kinds=("hidden", "mlp", "attn"))
"""
from __future__ import annotations

import time

from ..errors import EditkitError
from .engine import fast_trace
from .noise import NoiseSpec, parse_noise
from .reference import reference_trace
from .result import TraceResult
from .setup import KINDS, TraceSetup, check_kind, prepare


def trace(lm, prompt: str, subject: str, target: str | None = None, kinds=("hidden", "mlp", "attn"),
          samples: int = 10, noise: NoiseSpec | str = "3s", window: int = 10, seed: int = 1,
          occurrence: int = 0, engine: str = "fast", progress=None) -> dict[str, TraceResult]:
    """Trace each kind; returns kind -> TraceResult. `progress(fraction, message)` is called along the way."""
    spec = parse_noise(noise) if isinstance(noise, (str, int, float)) else noise
    kinds = _kinds(kinds)
    setup = prepare(lm, prompt, subject, target, samples, spec, seed, occurrence)
    return trace_setup(lm, setup, kinds, window, engine, progress)


def _kinds(kinds) -> list[str]:
    kinds = list(KINDS) if kinds in ("all", None) else [kinds] if isinstance(kinds, str) else list(kinds)
    for kind in kinds:
        check_kind(kind)
    return kinds


def trace_setup(lm, setup: TraceSetup, kinds=("hidden", "mlp", "attn"), window: int = 10, engine: str = "fast",
                progress=None) -> dict[str, TraceResult]:
    """The traces of a prepared setup (reuse one setup for the heatmaps and the severing chart)."""
    kinds = _kinds(kinds)
    if not isinstance(window, int) or window < 1:
        raise EditkitError("window must be a positive integer")
    if engine not in ("fast", "reference"):
        raise EditkitError("engine must be 'fast' or 'reference'")
    start = time.perf_counter()
    run = fast_trace if engine == "fast" else reference_trace
    results = {}
    for i, kind in enumerate(kinds):
        t0 = time.perf_counter()
        step = (lambda f, i=i, kind=kind: progress((i + f) / len(kinds), f"tracing {kind}")) if progress else None
        scores = run(lm, setup, kind, window, step)
        results[kind] = TraceResult(
            tokens=setup.tokens, subject_range=setup.subject_range, answer=setup.answer, answer_id=setup.answer_id,
            high_score=setup.high_score, low_score=setup.low_score, kind=kind,
            window=1 if kind == "hidden" else window, noise_scale=setup.scale, noise=setup.noise_spec.to_dict(),
            samples=setup.n, seed=setup.seed, scores=scores.tolist(), seconds=time.perf_counter() - t0,
            meta={"model": lm.name, "prompt": setup.prompt, "engine": engine},
        )
    if progress:
        progress(1.0, f"done in {time.perf_counter() - start:.1f} s")
    return results


__all__ = ["trace", "trace_setup", "TraceResult", "TraceSetup", "prepare", "fast_trace", "reference_trace", "parse_noise", "KINDS"]
