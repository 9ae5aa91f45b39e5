"""Average indirect effect over the facts the model knows (Meng et al. 2022, Fig. 2 / Sec. 2.2).

For every known fact (editkit.data.facts.predicted_facts) the three traces are run; each token is put in a class
(first / middle / last subject token, first subsequent token, further tokens, last token) and its indirect
effect IE = p_restored - p_corrupted is averaged per class and layer over facts, with a 95% band
mean +- 1.96 * sd / sqrt(N). Every fact is traced by the same exact engine through the shared result cache
(tracer.py): an interrupted computation resumes where it stopped, the page shows it at once afterwards, and a fact
traced on the tracing page (same options) is not traced again. An edited model has its own entries (the cache key
holds the weights' fingerprint).

Each fact is one work item (`trace_fact`, editkit/runtime/cluster.py): in process they run one after the other; on Ray
(`backend`) the workers trace facts in parallel and write the same cache (a rerun reads what any worker traced),
and the rows come back in fact order, so the averages are those of the serial run.

`shipped_runs()` reads the runs reported in the README (`assets/results/aie-<model>.json`, the output of
`aie --json`), so the page can show a model's average at once instead of after an hour of tracing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import EditkitError
from ..core.paths import ASSETS
from ..core.results import JsonObject, Result, frame, json_input
from ..data.facts import predicted_facts
from ..figures.tracing import aie_figure, aie_panels
from ..model.sites import TRACE_KINDS
from ..runtime.cluster import Backend, Item, run_items
from .spec import TraceSpec
from .tracer import Tracer

SHIPPED_DIR = ASSETS / "results"  # aie-<model>.json: `python -m editkit aie --model <model> ... --json`
CLASSES = ("first subject", "middle subject", "last subject", "first subsequent", "further tokens", "last token")


@dataclass(frozen=True)
class Band:
    """A mean curve over layers with its 95% band (mean +- 1.96 sd / sqrt(n)) over `n` facts."""

    mean: list[float]
    low: list[float]
    high: list[float]
    n: int

    def to_json(self) -> JsonObject:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}


@dataclass
class AIE(Result):
    """The average indirect effect (ROME Fig. 2): per kind and token class, a Band over layers. What `aie --json`
    writes and assets/results/aie-<model>.json ship; `model`, `seconds`, `cached_facts` and `facts` are the CLI's
    additions (None where a run did not record them)."""

    n_facts: int
    samples: int
    noise: str
    window: int
    classes: list[str]
    layers: int
    kinds: dict[str, dict[str, Band]]
    model: str | None = None
    seconds: float | None = None
    cached_facts: int | None = None
    facts: int | None = None
    shipped: bool = field(default=False, compare=False)  # read from the shipped results, not computed here

    OPTIONAL = ("model", "seconds", "cached_facts", "facts")

    def peak(self, kind: str, token_class: str) -> tuple[int, float]:
        """(layer, mean IE) where the class's mean curve of `kind` is highest."""
        mean = self.kinds[kind][token_class].mean
        layer = max(range(len(mean)), key=mean.__getitem__)
        return layer, mean[layer]

    def headline(self) -> str:
        parts = [f"{kind} at the {c} token peaks at layer {self.peak(kind, c)[0]}"
                 for kind, c in (("mlp", "last subject"), ("attn", "last token"))
                 if c in self.kinds.get(kind, {})]
        return f"{self.model or 'a model'}, {self.n_facts} facts: " + "; ".join(parts)

    def to_json(self) -> JsonObject:
        d = {"n_facts": self.n_facts, "samples": self.samples, "noise": self.noise, "window": self.window,
             "classes": list(self.classes), "layers": self.layers,
             "kinds": {k: {c: b.to_json() for c, b in per.items()} for k, per in self.kinds.items()}}
        d.update({k: getattr(self, k) for k in self.OPTIONAL if getattr(self, k) is not None})
        return d

    @classmethod
    def _from_json(cls, d: dict) -> "AIE":
        kinds = {k: {c: Band(**b) for c, b in per.items()} for k, per in d["kinds"].items()}
        return cls(d["n_facts"], d["samples"], d["noise"], d["window"], list(d["classes"]), d["layers"], kinds,
                   **{k: d.get(k) for k in cls.OPTIONAL})

    def figure(self, kind: str | None = None):
        """ROME's Fig. 2: the three kinds side by side (or one `kind`), one curve per token class with its band."""
        return aie_panels(self.to_json()) if kind is None else aie_figure(self.to_json(), kind)

    def to_frame(self):
        """One row per kind, token class and layer: mean, low, high, n."""
        return frame([{"kind": k, "token_class": c, "layer": l, "mean": b.mean[l], "low": b.low[l],
                       "high": b.high[l], "n": b.n}
                      for k, per in self.kinds.items() for c, b in per.items() for l in range(len(b.mean))])


def token_classes(n_tokens: int, subject_range: tuple[int, int]) -> dict[str, list[int]]:
    b, e = subject_range
    last = n_tokens - 1
    classes = {c: [] for c in CLASSES}
    for t in range(n_tokens):
        if t == last:
            classes["last token"].append(t)
        elif t == b:
            classes["first subject"].append(t)
        elif t == e - 1:
            classes["last subject"].append(t)
        elif b < t < e - 1:
            classes["middle subject"].append(t)
        elif t == e:
            classes["first subsequent"].append(t)
        elif t > e:
            classes["further tokens"].append(t)
    if e - 1 == last:  # subject at the very end: its last token is also the last token
        classes["last subject"].append(last)
    return classes


@dataclass(frozen=True)
class FactTraces:
    """What the averages read of one fact's three traces: the corrupted and clean p, the tokens' count and the
    subject's range, each kind's scores (tokens x layers), and whether all three came from the cache."""

    known_id: int
    low: float
    high: float
    n_tokens: int
    subject_range: tuple[int, int]
    scores: dict[str, list[list[float]]]
    cached: bool


def trace_fact(lm, fact: dict, samples: int, noise: str, window: int, cache: bool = True, cancel=None,
               progress=None) -> FactTraces:
    """The three traces of one fact (through the shared result cache), as one work item."""
    spec = TraceSpec(fact["prompt"], fact["subject"], samples=samples, noise=noise, window=window)
    tracer = Tracer(lm, spec, cache=cache, cancel=cancel)
    hit = all(tracer.cached(kind) is not None for kind in TRACE_KINDS)
    results = tracer.results(TRACE_KINDS, progress, together=True)
    first = results["hidden"]
    return FactTraces(fact["known_id"], first.low_score, first.high_score, len(first.tokens),
                      tuple(first.subject_range), {kind: r.scores for kind, r in results.items()}, hit)


def average_indirect_effect(lm, n_facts: int = 50, samples: int = 10, noise: str = "3s", window: int = 10,
                            progress=None, cache: bool = True, cancel=None, stats: dict | None = None,
                            backend: Backend | None = None) -> AIE:
    """Per kind and token class: mean IE per layer, its 95% band, and N (facts). `stats`, if given, receives the
    seconds it took and how many facts came from the cache (the CLI adds them to its JSON). `backend`: where the
    facts are traced (in process by default; `cancel` is checked in process only, a Ray run stops when
    `progress` raises Cancelled)."""
    if not isinstance(n_facts, int) or n_facts < 1:
        raise EditkitError("n_facts must be at least 1")
    facts = predicted_facts(lm)[:n_facts]
    if not facts:
        raise EditkitError("the model predicts none of the known facts")
    t0 = time.perf_counter()
    ray = backend is not None and backend.ray
    extra = {"cache": cache} if ray else {"cache": cache, "cancel": cancel}
    items = [Item(trace_fact, (fact, samples, noise, window), extra, label=f"fact {fact['known_id']}",
                  progress=True) for fact in facts]
    rows = run_items(lm, items, backend, progress)
    hits = sum(row.cached for row in rows)
    kinds: dict[str, dict[str, Band]] = {}
    if stats is not None:
        stats.update(seconds=round(time.perf_counter() - t0, 2), cached_facts=hits, facts=len(facts))
    for kind in TRACE_KINDS:
        per_class = {}
        for c in CLASSES:
            values = []
            for row in rows:
                idx = token_classes(row.n_tokens, row.subject_range)[c]
                if idx:
                    ie = np.array(row.scores[kind])[idx] - row.low
                    values.append(ie.mean(0))
            if values:
                v = np.stack(values)
                sd = v.std(0, ddof=1) if len(v) > 1 else np.zeros(v.shape[1])
                half = 1.96 * sd / np.sqrt(len(v))
                per_class[c] = Band(v.mean(0).tolist(), (v.mean(0) - half).tolist(),
                                    (v.mean(0) + half).tolist(), len(v))
        kinds[kind] = per_class
    return AIE(len(rows), samples, noise, window, list(CLASSES), lm.adapter.n_layers, kinds, model=lm.name)


def load_run(path) -> AIE:
    """One AIE run from a file written by `aie --json`; a file that is not one says so."""
    try:
        data = json_input(path)
    except EditkitError as exc:  # json_input says "cannot read <path>: <why>"
        raise EditkitError(f"cannot read AIE results from {str(exc).removeprefix('cannot read ')}") from None
    keys = ("model", "n_facts", "layers", "classes", "kinds")
    if not isinstance(data, dict) or any(k not in data for k in keys):
        raise EditkitError(f"{path} holds no AIE run (expected the output of `aie --json`)")
    return AIE.from_json(data)


def shipped_runs() -> dict[str, AIE]:
    """model name -> its shipped AIE run (the manual's results), marked `shipped`."""
    runs = [load_run(p) for p in sorted(SHIPPED_DIR.glob("aie-*.json"))]
    for run in runs:
        run.shipped = True
    return {run.model: run for run in runs}
