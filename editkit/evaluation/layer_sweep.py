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

Each layer's edit and measurement is one work item (`edit_at_layer`, editkit/runtime/cluster.py), and so is the trace: in
process they run one after the other; on Ray (`backend`) the workers run them in parallel (the statistics are
computed and cached here first), and the rows come back in layer order, equal to the serial run's.
"""
from __future__ import annotations

import math
import time

from ..core.errors import EditkitError
from ..core.progress import part
from ..editing.api import prepare_first_use, run_edit
from ..editing.defaults import load_hparams
from ..editing.methods import get
from ..editing.requests import EditRequest
from ..model import isolation
from ..runtime.cluster import Backend, Item, run_items
from ..tracing import TraceSpec, trace
from .datasets import as_record
from .measure import measure, record_metrics


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


def trace_profile(lm, request: EditRequest, kind: str = "mlp", samples: int = 10, seed: int = 1) -> dict:
    """The request's causal trace of `kind` and its row at the subject's last token (per layer), with the peak."""
    answer = request.target_true
    with isolation.session(lm):
        r = trace(lm, TraceSpec(request.rewrite, request.subject, answer, samples, seed=seed, kinds=kind))[kind]
    return profile_of(r.to_json())


def profile_of(trace_result: dict) -> dict:
    """The row of a trace (TraceResult.to_json()) at the subject's last token, per layer, and its peak layer."""
    r = trace_result
    t = r["subject_range"][1] - 1
    row = r["scores"][t]
    peak = max(range(len(row)), key=row.__getitem__)
    return {"kind": r["kind"], "answer": r["answer"], "token": r["tokens"][t], "token_index": t, "scores": row,
            "indirect_effect": [s - r["low_score"] for s in row], "peak_layer": peak, "low_score": r["low_score"],
            "high_score": r["high_score"], "trace": r}


def edit_at_layer(lm, method: str, record, hp, pre: dict) -> dict:
    """One row of the sweep: `method` with hp (one layer) on the record's request, measured against `pre`."""
    layer = hp.layers[0]
    start = time.perf_counter()
    with isolation.session(lm):
        result = run_edit(lm, method, [record.request], hp)
    with isolation.session(lm, result.delta):
        post = measure(lm, record, n_gen=0, greedy_tokens=0)
    m = record_metrics(pre, post, record, None)
    p_pre, p_post = _p(pre["rewrite"]["nll_new"]), _p(post["rewrite"]["nll_new"])
    return {"layer": layer, "efficacy": m["post_efficacy"], "generalization": m["post_generalization"],
            "specificity": m["post_specificity"], "efficacy_magnitude": m["post_efficacy_magnitude"],
            "generalization_magnitude": m["post_generalization_magnitude"],
            "specificity_magnitude": m["post_specificity_magnitude"],
            "rewrite_score": (p_post - p_pre) / max(1 - p_pre, 1e-12), "p_new": p_post,
            "relative_norm": max((n.relative_norm for n in result.norms.values()), default=0),
            "seconds": round(time.perf_counter() - start, 2)}


def layer_sweep(lm, request, layers=None, method: str = "rome", hparams: dict | None = None,
                trace_kind: str | None = "mlp", samples: int = 10, progress=None,
                trace_result: dict | None = None, backend: Backend | None = None) -> dict:
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
    with isolation.session(lm):
        prepare_first_use(lm, list(hps.values()), progress=lambda f, m: say(0.1 * f, m), method=spec.name)
        pre = measure(lm, record, n_gen=0, greedy_tokens=0)
    items = [Item(edit_at_layer, (spec.name, record, hps[l], pre), label=f"{spec.label} at layer {l}")
             for l in layers]
    traced = trace_kind and not trace_result
    if traced:
        items.append(Item(trace_profile, (request, trace_kind, samples),
                          label=f"causal trace ({trace_kind}, {samples} samples)"))
    rows = run_items(lm, items, backend, part(say, 0.1, 1.0))
    profile = rows.pop() if traced else None
    if trace_result:
        profile = profile_of(trace_result)
    say(1.0, "layer sweep done")
    m0 = record_metrics(pre, pre, record, None)
    unedited = {k: m0[f"pre_{k}"] for k in ("efficacy", "generalization", "specificity", "efficacy_magnitude",
                                            "generalization_magnitude", "specificity_magnitude")}
    best = max(rows, key=lambda r: (r["efficacy_magnitude"] or 0) + (r["generalization_magnitude"] or 0)
               + (r["specificity_magnitude"] or 0))
    return {"model": lm.name, "method": spec.name, "request": request.to_dict(), "layers": layers, "rows": rows,
            "unedited": unedited, "trace": profile, "best_layer": best["layer"],
            "default_layers": list(load_hparams(spec.name, lm).layers),
            "peak_layer": profile["peak_layer"] if profile else None}


def _p(nlls: list[float]) -> float:
    return math.exp(-nlls[0]) if nlls else float("nan")
