"""Causal tracing (Meng et al. 2022): where in the network does the model recall a fact?

    spec = TraceSpec("The Space Needle is in downtown", "Space Needle", kinds=("hidden", "mlp", "attn"))
    results = trace(lm, spec)                                  # Traces: kind -> TraceResult
    tr = Tracer(lm, spec); tr.preview(); tr.result("mlp"); tr.severing()   # step by step, cached

- spec.py: what a trace computes (TraceSpec); setup.py: the clean and corrupted runs (TraceSetup.build);
  reference.py: ROME's algorithm (what the engine must reproduce);
- engine.py: the exact engine (restorations stepped block by block, per-sample keys/values, shared prefixes,
  batched projection to the vocabulary: score_restorations); attribution.py: the first-order preview;
- tracer.py: step-by-step traces with the shared result cache; severing.py, aie.py: ROME's Fig. 4 and Fig. 2.
"""
from __future__ import annotations

from ..core.errors import Cancelled
from .engine import fast_trace
from .noise import NoiseSpec, parse_noise
from .reference import reference_trace
from .result import TraceResult, Traces
from .setup import TraceSetup
from .severing import Severing
from .spec import TraceSpec, check_kinds
from .tracer import Tracer


def trace(lm, spec: TraceSpec, engine: str = "fast", progress=None, cache: bool = True,
          cancel=None) -> Traces:
    """Trace each of the spec's kinds; returns Traces (kind -> TraceResult). `progress(fraction, message)` is
    called along the way. Results come from the shared cache when the same weights and inputs were traced
    before (cache=False recomputes); `cancel()` returning True stops the trace with Cancelled."""
    out = Tracer(lm, spec, cache, cancel).results(spec.kinds, progress, engine, together=True)
    if progress:
        progress(1.0, "done")
    return out


__all__ = ["trace", "Tracer", "TraceSpec", "TraceResult", "Traces", "Severing", "TraceSetup", "NoiseSpec", "fast_trace",
           "reference_trace", "parse_noise", "check_kinds", "Cancelled"]
