"""Does localization inform editing? (Hase et al. 2023): edit one request at every layer and compare with its trace.

ROME edits the layer where causal tracing finds the MLP effect of the subject's last token. Hase et al. edited every
layer and found that how well an edit works barely depends on where tracing localizes the fact. `layer_sweep` does
it for one request: for each layer l it runs the method with layers = [l] and measures, on the request's own
prompts (measure.measure):
    efficacy / generalization   P(new) - P(true) on the rewrite / paraphrase prompts (and the 0/1 rates)
    specificity                 P(true) - P(new) on the neighbourhood prompts (and the rate)
    rewrite score               (P_post(new) - P_pre(new)) / (1 - P_pre(new))   (Hase et al., Sec. 3)
with P = exp(-mean per-token NLL) as in the CounterFact metrics (metrics.py), and traces the request (the trace's
answer is target_true when given, else the model's prediction), reporting the restored probability at the
subject's last token per layer and its peak layer, on the same layer axis. The `best_layer` is the one with the
largest sum of the three magnitudes.

Each layer's edit and measurement is one work item (`edit_at_layer`, editkit/runtime/cluster.py), and so is
the trace: in process they run one after the other; on Ray (`backend`) the workers run them in parallel (the
statistics are computed and cached here first), and the rows come back in layer order, equal to the serial
run's. Before the items, a method that declares its target optimisation (Method.targets) has every layer's
targets optimized in one batch (targets.optimize_layers: one larger batch per block instead of one small run
per layer), kept in the targets cache (editing/memo.py) where each layer's edit finds them; ROME's keys at
every layer are read in one run (keys.prefetch_keys) for the edits in this process.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

from ..core.errors import EditkitError
from ..core.progress import part
from ..core.results import JsonObject, Result, frame
from ..editing.defaults import load_hparams
from ..editing.keys import prefetch_keys, reuse_keys
from ..editing.memo import reuse_targets
from ..editing.methods import get
from ..editing.requests import EditRequest, parse_record
from ..editing.run import prepare_first_use, run_edit
from ..figures.side_effects import layer_sweep_figure
from ..model import isolation
from ..runtime.cluster import Backend, Item, run_items
from ..tracing import TraceResult, TraceSpec, trace
from .datasets import as_record
from .measure import measure, record_metrics
from .metrics import margins
from .verdict import MARGIN_MEASURE, Ranking, paired


@dataclass
class LayerRow:
    """The edit at one layer, measured on the request's own prompts (module docstring): rates, magnitudes (P(new)
    - P(true), or the reverse for specificity), Hase et al.'s rewrite score, ||dW|| / ||W|| and seconds."""

    layer: int
    efficacy: float | None
    generalization: float | None
    specificity: float | None
    efficacy_magnitude: float | None
    generalization_magnitude: float | None
    specificity_magnitude: float | None
    rewrite_score: float
    p_new: float
    relative_norm: float
    seconds: float
    margins: dict | None = None  # group -> each prompt's margin (verdict.py's noise); None in sweeps stored earlier

    @property
    def total(self) -> float:
        """The summed magnitudes the best layer is chosen by."""
        return ((self.efficacy_magnitude or 0) + (self.generalization_magnitude or 0)
                + (self.specificity_magnitude or 0))


@dataclass
class TraceProfile:
    """A trace's row at the subject's last token: p(answer) per restored layer, its indirect effect and peak; the
    whole trace in `trace` (None where it is stored elsewhere, as in a lesson pack)."""

    kind: str
    answer: str
    token: str
    token_index: int
    scores: list[float]
    indirect_effect: list[float]
    peak_layer: int
    low_score: float
    high_score: float
    trace: TraceResult | None = None

    def to_json(self) -> JsonObject:
        d = {k: v for k, v in asdict(self).items() if k != "trace"}
        if self.trace is not None:
            d["trace"] = self.trace.to_json()
        return d

    @classmethod
    def from_json(cls, d: dict) -> "TraceProfile":
        trace_json = d.get("trace")
        return cls(**{k: v for k, v in d.items() if k != "trace"},
                   trace=TraceResult._from_json(trace_json) if trace_json else None)


@dataclass
class LayerSweep(Result):
    """One request edited at each layer (module docstring): a LayerRow per layer, the unedited model's rates and
    magnitudes, the request's trace profile (None without one), the best layer by the summed magnitudes and the
    method's default layers."""

    model: str
    method: str
    request: EditRequest
    layers: list[int]
    rows: list[LayerRow]
    unedited: dict
    trace: TraceProfile | None
    best_layer: int
    default_layers: list[int]
    peak_layer: int | None

    def headline(self) -> str:
        where = f"; the {self.trace.kind} trace peaks at layer {self.peak_layer}" if self.trace else ""
        return f"{self.method} at {len(self.rows)} layers: best layer {self.best_layer}{where}"

    def to_json(self) -> JsonObject:
        return {"model": self.model, "method": self.method, "request": self.request.to_dict(), "layers": self.layers,
                "rows": [asdict(r) for r in self.rows], "unedited": self.unedited,
                "trace": self.trace.to_json() if self.trace else None, "best_layer": self.best_layer,
                "default_layers": self.default_layers, "peak_layer": self.peak_layer}

    @classmethod
    def _from_json(cls, d: dict) -> "LayerSweep":
        return cls(d["model"], d["method"], parse_record(d["request"]), d["layers"], [LayerRow(**r) for r in d["rows"]],
                   d["unedited"], TraceProfile.from_json(d["trace"]) if d.get("trace") else None, d["best_layer"],
                   d["default_layers"], d["peak_layer"])

    def to_frame(self):
        """One row per edited layer (LayerRow's fields; the per-prompt margins left out: see `rows`)."""
        return frame([{k: v for k, v in asdict(r).items() if k != "margins"} for r in self.rows])

    def figure(self):
        """The request's trace on top and, on the same layer axis, the edit's magnitudes at each layer."""
        return layer_sweep_figure(self.to_json())

    def ranking(self) -> "Ranking | None":
        """The layers ranked by the summed margins with their noise (module function `ranking`)."""
        return ranking({r.layer: r.margins for r in self.rows})


def parse_layers(text, n_layers: int) -> list[int]:
    """'2,4,6' or '0-17' or a list -> sorted layers, checked against the model."""
    if text is None or text == "" or text == "all":
        return list(range(n_layers))
    if isinstance(text, (list, tuple)):
        layers = list(text)
    else:
        layers = []
        for part in str(text).split(","):
            part = part.strip()
            a, sep, b = part.partition("-")
            try:
                layers += list(range(int(a), int(b) + 1)) if sep else [int(part)]
            except ValueError:
                raise EditkitError(f"layers look like '2,4,6' or '0-17', not {text!r}") from None
    if not layers or any(not isinstance(l, int) or not 0 <= l < n_layers for l in layers):
        raise EditkitError(f"layers must be within 0..{n_layers - 1}, not {text!r}")
    return sorted(set(layers))


def trace_profile(lm, request: EditRequest, kind: str = "mlp", samples: int = 10, seed: int = 1) -> TraceProfile:
    """The request's causal trace of `kind` and its row at the subject's last token (per layer), with the peak."""
    answer = request.target_true
    with isolation.session(lm):
        r = trace(lm, TraceSpec(request.rewrite, request.subject, answer, samples, seed=seed, kinds=kind))[kind]
    return profile_of(r)


def profile_of(r: TraceResult) -> TraceProfile:
    """The row of a trace at the subject's last token, per layer, and its peak layer."""
    t = r.subject_range[1] - 1
    row = r.scores[t]
    peak = max(range(len(row)), key=row.__getitem__)
    return TraceProfile(r.kind, r.answer, r.tokens[t], t, row, [s - r.low_score for s in row], peak, r.low_score,
                        r.high_score, r)


def edit_at_layer(lm, method: str, record, hp, pre: dict) -> LayerRow:
    """One row of the sweep: `method` with hp (one layer) on the record's request, measured against `pre`."""
    layer = hp.layers[0]
    start = time.perf_counter()
    with isolation.session(lm), reuse_targets(disk=True):  # the targets layer_sweep optimized for every layer
        result = run_edit(lm, method, [record.request], hp)
    with isolation.session(lm, result.delta):
        post = measure(lm, record, n_gen=0, greedy_tokens=0)
    m = record_metrics(pre, post, record, None)
    p_pre, p_post = _p(pre["rewrite"]["nll_new"]), _p(post["rewrite"]["nll_new"])
    return LayerRow(layer, m["post_efficacy"], m["post_generalization"], m["post_specificity"],
                    m["post_efficacy_magnitude"], m["post_generalization_magnitude"], m["post_specificity_magnitude"],
                    (p_post - p_pre) / max(1 - p_pre, 1e-12), p_post,
                    max((n.relative_norm for n in result.norms.values()), default=0),
                    round(time.perf_counter() - start, 2),
                    {g: margins(post[g]["nll_new"], post[g]["nll_true"], g != "neighborhood")
                     for g in ("rewrite", "paraphrase", "neighborhood")})


def layer_sweep(lm, request, layers=None, method: str = "rome", hparams: dict | None = None,
                trace_kind: str | None = "mlp", samples: int = 10, progress=None,
                trace_result: TraceResult | None = None, backend: Backend | None = None) -> LayerSweep:
    """Edit `request` at each of `layers` (default: every layer) with a one-layer method and measure it; with a
    `trace_kind`, also trace it (or use `trace_result`, a trace of the same prompt already computed). The model is
    unchanged afterwards. `backend`: where the layers' items run (in process by default)."""
    spec = get(method)
    record = as_record(request)
    request = record.request
    if not request.target_true:
        raise EditkitError("a layer sweep needs the true target too (the trace's answer and the comparisons)")
    layers = parse_layers(layers, lm.adapter.n_layers)
    hps = {l: load_hparams(spec.name, lm, {**(hparams or {}), "layers": [l]}) for l in layers}
    if any(len(hp.layers) != 1 for hp in hps.values()):
        raise EditkitError("a layer sweep edits one layer at a time")
    say = progress or (lambda f, m: None)
    say(0.0, f"what {spec.label} reads at layers {layers[0]}..{layers[-1]} (one statistics pass, cached)")
    with reuse_keys():  # every layer's keys read in one run, for the edits in this process
        with isolation.session(lm):
            prepare_first_use(lm, list(hps.values()), progress=lambda f, m: say(0.1 * f, m), method=spec.name)
            pre = measure(lm, record, n_gen=0, greedy_tokens=0)
            if spec.name == "rome":  # the keys its edits read (keys.keys_at), every layer's in one run
                prefetch_keys(lm, layers, request, hps[layers[0]])
        start = 0.1
        if spec.targets:
            start = 0.5
            _targets_together(lm, spec, request, hps, part(say, 0.1, start, "targets at every layer in one batch: "))
        items = [Item(edit_at_layer, (spec.name, record, hps[l], pre), label=f"{spec.label} at layer {l}")
                 for l in layers]
        traced = trace_kind and not trace_result
        if traced:
            items.append(Item(trace_profile, (request, trace_kind, samples),
                              label=f"causal trace ({trace_kind}, {samples} samples)"))
        rows = run_items(lm, items, backend, part(say, start, 1.0))
    profile = rows.pop() if traced else None
    if trace_result:
        profile = profile_of(trace_result)
    say(1.0, "layer sweep done")
    m0 = record_metrics(pre, pre, record, None)
    unedited = {k: m0[f"pre_{k}"] for k in ("efficacy", "generalization", "specificity", "efficacy_magnitude",
                                            "generalization_magnitude", "specificity_magnitude")}
    best = max(rows, key=lambda r: r.total)
    return LayerSweep(lm.name, spec.name, request, layers, rows, unedited, profile, best.layer,
                      list(load_hparams(spec.name, lm).layers), profile.peak_layer if profile else None)


def ranking(margins_by_layer: dict[int, dict | None]) -> Ranking | None:
    """A sweep's layers (layer -> its LayerRow.margins) ranked by the summed margins (the `best_layer`'s measure),
    each layer's difference from the best with its noise over the prompts (evaluation/verdict.py); None for a sweep
    stored without its per-prompt margins (made before they were kept)."""
    if not margins_by_layer or any(m is None for m in margins_by_layer.values()):
        return None
    return paired(margins_by_layer, f"the summed margin ({MARGIN_MEASURE})",
                  labels={layer: f"layer {layer}" for layer in margins_by_layer})


def _targets_together(lm, spec, request, hps: dict, progress) -> None:
    """Every layer's target vectors in one batch, into the targets cache the layers' edits read (module
    docstring)."""
    from ..editing.targets import optimize_layers

    first = hps[min(hps)]
    sites, _, adaptive = spec.targets(first)
    with isolation.session(lm), reuse_targets(disk=True):
        optimize_layers(lm, request, [spec.targets(hp)[1] for hp in hps.values()], sites, first, adaptive, progress)


def _p(nlls: list[float]) -> float:
    return math.exp(-nlls[0]) if nlls else float("nan")
