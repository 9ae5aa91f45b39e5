"""A trace step by step, with a shared result cache: what pages, the CLI and the average indirect effect use.

    tr = Tracer(lm, TraceSpec("The Space Needle is in downtown", "Space Needle"))
    tr.preview()            # kind -> TraceResult estimated by attribution patching (under a second)
    tr.result("mlp")        # the exact heatmap (cached: the same weights and inputs return it at once)
    tr.severing()           # ROME's severing chart at the last subject token (reuses the hidden panel's row)

The cache (editkit/core/cache.py Store "tracing/results") is shared by every session of the server and the CLI. Its key
is the model name, the prompt, subject, target, samples, noise, seed, subject occurrence, window (MLP/attention
only), the engine version and `fingerprint(lm)`: a digest of the base weights plus the edits active in this context,
so an edited model never gets the unedited model's trace. Construct a Tracer in the context whose weights it should
trace (inside `isolation.session(lm, deltas)` for an edited model) and use it there.

`exact_panels` is the tracing page's whole trace (exact panels and severing) as one work item, for a Ray worker.

Cancelling: `cancel` is a callable (e.g. threading.Event().is_set); the engine checks it at every block step and
raises Cancelled, leaving the model and the cache as they were.
"""
from __future__ import annotations

import time

from ..core.cache import Store
from ..core.errors import Cancelled, EditkitError
from ..core.progress import part
from ..model.sites import TRACE_KINDS
from ..model.weights import fingerprint
from .agreement import agreement_note
from .attribution import attribution
from .engine import Work, fast_trace, fast_traces
from .reference import reference_trace
from .result import TraceResult, Traces
from .setup import TraceSetup
from .severing import Severing, sever
from .spec import TraceSpec, check_kind, check_kinds

ENGINE_VERSION = 3  # part of every cache key: bump when the engine's numbers may change (3: low_sd kept)
RESULTS = Store("tracing/results", version=ENGINE_VERSION)


class Tracer:
    """One traced prompt (see module docstring). Nothing is computed until a result is asked for."""

    def __init__(self, lm, spec: TraceSpec, cache: bool = True, cancel=None):
        self.lm, self.spec, self.cache, self.cancel = lm, spec, cache, cancel
        self.key = {"prompt": spec.prompt, "subject": spec.subject, "target": spec.target, "samples": spec.samples,
                    "noise": spec.noise.to_dict(), "seed": spec.seed, "occurrence": spec.occurrence,
                    "weights": fingerprint(lm) if cache else None,
                    **({"precision": spec.precision} if spec.fast else {})}  # exact entries keep their keys
        self._setup: TraceSetup | None = None
        self._results: dict[str, TraceResult] = {}
        self.setup_s = 0.0

    # --- inputs --------------------------------------------------------------------------------------------------
    @property
    def setup(self) -> TraceSetup:
        """The clean and corrupted runs (computed on first use)."""
        return self._build(False)

    def _build(self, gradients: bool) -> TraceSetup:
        if self._setup is None:
            t0 = time.perf_counter()
            self._setup = TraceSetup.build(self.lm, self.spec, gradients=gradients)
            self.setup_s = time.perf_counter() - t0
        return self._setup

    def _path(self, what: str):
        extra = {"window": self.spec.window} if what in ("mlp", "attn", "preview") else {}
        key = {k: v for k, v in self.key.items() if k != "precision" or what != "preview"}  # no matmuls of its own
        return RESULTS.path(self.lm.name, what=what, **key, **extra)

    def _get(self, what: str):
        return RESULTS.get(self._path(what)) if self.cache else None

    def _put(self, what: str, value) -> None:
        if self.cache:
            RESULTS.put(self._path(what), value)

    def _check(self, progress):
        """A progress function for the engine that first checks the cancel flag."""
        def step(fraction, message):
            if self.cancel is not None and self.cancel():
                raise Cancelled("the trace was cancelled")
            if progress:
                progress(fraction, message)
        return step

    # --- results -------------------------------------------------------------------------------------------------
    def cached(self, kind: str) -> TraceResult | None:
        """The stored exact result of `kind`, or None (computes nothing)."""
        check_kind(kind)
        if kind not in self._results:
            value = self._get(kind)
            if value is not None:
                result = TraceResult.from_json(value)
                result.meta["cached"] = True
                self._results[kind] = result
        return self._results.get(kind)

    def result(self, kind: str, progress=None, engine: str = "fast") -> TraceResult:
        """The exact heatmap of `kind` (ROME's scores), from the cache or computed and stored.
        `progress(fraction, message)`; engine "reference" recomputes with ROME's algorithm (never cached)."""
        check_kind(kind)
        if engine not in ("fast", "reference"):
            raise EditkitError("engine must be 'fast' or 'reference'")
        if engine == "fast" and self.cached(kind) is not None:
            return self._results[kind]
        setup = self.setup
        t0 = time.perf_counter()
        step = self._check(progress)
        if engine == "fast":
            work = Work()
            scores = fast_trace(self.lm, setup, kind, self.spec.window, step, work, self.spec.precision)
        else:
            work, scores = None, reference_trace(self.lm, setup, kind, self.spec.window, step)
        result = self._make(kind, scores.tolist(), time.perf_counter() - t0, engine)
        if work is not None:
            result.meta["work"] = work.to_dict()
        if engine == "fast":
            self._put(kind, result.to_json())
            self._results[kind] = result
        return result

    def results(self, kinds=None, progress=None, engine: str = "fast",
                together: bool = False) -> Traces:
        """Several kinds (default: the spec's); `progress(fraction, message)` over all of them. together=True
        computes the missing kinds
        in one schedule (engine.fast_traces: larger batches, one pass over the unembedding): faster, but no panel
        is ready before the others (pages stream panel by panel instead)."""
        kinds = check_kinds(self.spec.kinds if kinds is None else kinds)
        missing = [k for k in kinds if self.cached(k) is None]
        if together and engine == "fast" and len(missing) > 1:
            setup = self.setup
            t0 = time.perf_counter()
            work = Work()
            step = self._check((lambda f, msg: progress(f, "tracing " + ", ".join(missing))) if progress else None)
            scores = fast_traces(self.lm, setup, missing, self.spec.window, step, work, self.spec.precision)
            seconds = time.perf_counter() - t0
            for kind in missing:  # one run for all: each kind holds its share, and the run's own time
                result = self._make(kind, scores[kind].tolist(), seconds / len(missing), engine)
                result.meta.update(work=work.to_dict(), together=missing, run_s=round(seconds, 3))
                self._put(kind, result.to_json())
                self._results[kind] = result
        out = {}
        for i, kind in enumerate(kinds):
            step = ((lambda f, msg, i=i, kind=kind: progress((i + f) / len(kinds), f"tracing {kind}")) if progress
                    else None)
            out[kind] = self.result(kind, step, engine)
        return Traces(out)

    def preview(self, kinds=None) -> Traces:
        """Attribution-patching estimates of the heatmaps (attribution.py; default: the spec's kinds), labelled
        meta["estimate"] = True, each with its measured agreement with the exact panels over known facts
        (meta["agreement"], agreement.py)."""
        kinds = check_kinds(self.spec.kinds if kinds is None else kinds)
        value = self._get("preview")
        if value is None:
            t0 = time.perf_counter()
            est = attribution(self.lm, self._build(gradients=True), TRACE_KINDS, self.spec.window)
            seconds = time.perf_counter() - t0
            value = {k: self._make(k, est[k].tolist(), seconds, "attribution").to_json() for k in TRACE_KINDS}
            for v in value.values():
                v["meta"]["estimate"] = True
            self._put("preview", value)
        out = Traces({k: TraceResult.from_json(value[k]) for k in kinds})
        for k, r in out.items():  # how far this panel's preview is from the exact trace, as measured
            r.meta["agreement"] = agreement_note(self.lm.name, k)
        return out

    def severing(self, token: int | None = None, progress=None) -> Severing:
        """Per layer, the hidden state at `token` (default: the last subject token) restored with nothing, the
        MLPs, or the attention frozen at their corrupted values in all later layers at that token (ROME Fig. 4).
        The "none" curve is the hidden panel's row, taken from its result when it is known.
        `progress(fraction, message)`."""
        what = "severing" if token is None else f"severing-{token}"
        value = self._get(what)
        if value is not None:
            return Severing.from_json(value)
        hidden = self.cached("hidden") or self._results.get("hidden")
        result = sever(self.lm, self.setup, token, hidden.scores if hidden is not None else None,
                       self._check(progress), self.spec.precision)
        self._put(what, result.to_json())
        return result

    def _make(self, kind: str, scores: list, seconds: float, engine: str) -> TraceResult:
        s = self.setup
        return TraceResult(
            tokens=s.tokens, subject_range=s.subject_range, answer=s.answer, answer_id=s.answer_id,
            high_score=s.high_score, low_score=s.low_score, low_sd=s.low_sd, kind=kind,
            window=1 if kind == "hidden" else self.spec.window,
            noise_scale=s.scale, noise=s.noise_spec.to_dict(), samples=s.n, seed=s.seed, scores=scores,
            seconds=seconds, meta={"model": self.lm.name, "prompt": s.prompt, "engine": engine,
                                   "setup_s": round(self.setup_s, 3),
                                   **({"precision": self.spec.precision, "approximation": True}
                                      if self.spec.fast and engine == "fast" else {})},
        )


def exact_panels(lm, spec: TraceSpec, kinds=None, cache: bool = True, progress=None) -> tuple[Traces, Severing]:
    """The tracing page's trace as one work item (editkit/runtime/cluster.py, e.g. on a Ray worker): each kind's exact
    result, computed panel by panel as the page computes them in process, then the severing chart."""
    tracer = Tracer(lm, spec, cache=cache)
    kinds = check_kinds(spec.kinds if kinds is None else kinds)
    n = len(kinds) + 1
    exact = {kind: tracer.result(kind, part(progress, i / n, (i + 1) / n, f"exact {kind} panel: "))
             for i, kind in enumerate(kinds)}
    return Traces(exact), tracer.severing(progress=part(progress, len(kinds) / n, 1.0, "severing: "))
