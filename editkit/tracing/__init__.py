"""Causal tracing (Meng et al. 2022): where in the network does the model recall a fact?

    results = trace(lm, "The Space Needle is in downtown", "Space Needle", kinds=("hidden", "mlp", "attn"))
    tr = Tracer(lm, prompt, subject); tr.preview(); tr.result("mlp"); tr.severing()   # step by step, cached

- setup.py: the clean and corrupted runs; reference.py: ROME's algorithm (what the engine must reproduce);
- engine.py: the exact engine (restorations stepped block by block, per-sample keys/values, shared prefixes,
  batched unembedding); attribution.py: the first-order preview (attribution patching);
- tracer.py: step-by-step traces with the shared result cache; severing.py, aie.py: ROME's Fig. 4 and Fig. 2.
"""
from __future__ import annotations

from ..errors import EditkitError
from ..errors import Cancelled
from .engine import fast_trace
from .noise import NoiseSpec, parse_noise
from .reference import reference_trace
from .result import TraceResult
from .setup import KINDS, TraceSetup, check_kind, prepare
from .tracer import Tracer, check_kinds


def trace(lm, prompt: str, subject: str, target: str | None = None, kinds=("hidden", "mlp", "attn"),
          samples: int = 10, noise: NoiseSpec | str = "3s", window: int = 10, seed: int = 1,
          occurrence: int = 0, engine: str = "fast", progress=None, cache: bool = True,
          cancel=None) -> dict[str, TraceResult]:
    """Trace each kind; returns kind -> TraceResult. `progress(fraction, message)` is called along the way.
    Results come from the shared cache when the same weights and inputs were traced before (cache=False
    recomputes); `cancel()` returning True stops the trace with Cancelled."""
    kinds = check_kinds(kinds)
    tracer = Tracer(lm, prompt, subject, target, samples, noise, window, seed, occurrence, cache, cancel)
    out = tracer.results(kinds, progress, engine, together=True)
    if progress:
        progress(1.0, "done")
    return out


def trace_setup(lm, setup: TraceSetup, kinds=("hidden", "mlp", "attn"), window: int = 10, engine: str = "fast",
                progress=None) -> dict[str, TraceResult]:
    """The traces of a prepared setup, never cached (reuse one setup for the heatmaps and the severing chart)."""
    if engine not in ("fast", "reference"):
        raise EditkitError("engine must be 'fast' or 'reference'")
    tracer = Tracer(lm, setup.prompt, "", None, setup.n, setup.noise_spec, window, setup.seed, cache=False,
                    setup=setup)
    return tracer.results(kinds, (lambda f, msg: progress(f, msg)) if progress else None, engine)


__all__ = ["trace", "trace_setup", "Tracer", "TraceResult", "TraceSetup", "prepare", "fast_trace", "reference_trace",
           "parse_noise", "KINDS", "Cancelled"]
