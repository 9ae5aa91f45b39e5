"""One entry point for every registered method (editing/methods/): run_edit(lm, name, requests, overrides).

The result's delta is not applied: the model is never changed. Use it in a computation with
`weights.applied(lm, result.delta)` (or `isolation.session(lm, [..., result.delta])`), save it with
`weights.save_patch`. What a method reads from the per-model caches (statistics, context templates) is computed
before its first edit, with progress messages (`prepare_first_use`), from what the method declares
(Method.first_use).
"""
from __future__ import annotations

import math
import time
from dataclasses import fields

import torch

from ..core.errors import EditkitError
from ..core.progress import duration, part
from .anchor import AnchorEstimate
from .context import context_templates, templates_cached
from .defaults import load_hparams
from .hparams import Hparams
from .methods import Method, all_methods, get
from .requests import parse_requests
from .result import EditResult, RequestReport, norm_report
from .stats import missing, pass_seconds, second_moment


def run_edit(lm, method: str, requests, hparams: "dict | Hparams | None" = None, progress=None,
             reference: bool = False, state=None, solves: bool = False) -> EditResult:
    """Compute an edit at the weights this context sees (base + any active session deltas). `hparams` overrides
    the per-model defaults (a dict), or is the method's complete typed hyperparameters. `reference` runs the target
    optimisation on the plain full model (a benchmark switch; same result, slower). `state` is the
    SequenceState of an ongoing sequence (editing/sequence.py), for stateful methods (others ignore it); the
    result's `state` is the next one. `solves` keeps each update's equation inputs in `result.solves` (checks and
    the bleed map's prediction; they hold C per layer)."""
    spec = get(method)
    if not isinstance(requests, list) or not requests or not all(hasattr(r, "rewrite") for r in requests):
        requests = parse_requests(requests)
    hp = hparams if isinstance(hparams, spec.hparams) else load_hparams(spec.name, lm, hparams)
    if prepare_first_use(lm, hp, part(progress, 0, 0.5) if progress else None, spec.name) and progress:
        progress = part(progress, 0.5, 1.0)  # the edit itself takes the second half
    extra = {"state": state} if spec.stateful else {}
    result = spec.apply(lm, requests, hp, progress=progress, reference=reference, solves=solves, **extra)
    for name, d in result.delta.items():
        if not bool(d.isfinite().all()):
            raise EditkitError(f"{spec.name} produced a non-finite update for {name}; check the hyperparameters")
    condition = bool(getattr(hp, "report_condition", False))  # the condition-number view, for every method
    if not result.norms or (condition and any(v.condition is None for v in result.norms.values())):
        result.norms = norm_report(lm.model, result.delta, condition)  # what every result reports
    if not result.per_request:
        result.per_request = [RequestReport(r.case_id) for r in requests]
    if result.hparams is None:
        result.hparams = hp
    bad = [k for k, v in result.norms.items() if not math.isfinite(v.relative_norm)]
    if bad:
        raise EditkitError(f"{spec.name} produced an unusable update for {', '.join(bad)}")
    return result


def _method_of(hp: Hparams) -> Method:
    for m in all_methods():
        if type(hp) is m.hparams:
            return m
    raise EditkitError(f"no registered method takes {type(hp).__name__}")


def first_use(lm, hp: Hparams, method: str | None = None) -> dict:
    """What an edit with `hp` (of `method`, by default the method whose hyperparameters `hp` are) still has to
    compute before it can start (empty on every edit but the first): {"statistics": {module: {positions:
    [layers]}}, "templates": bool}, from what the method declares (Method.first_use)."""
    spec = get(method) if method else _method_of(hp)
    declared = spec.first_use(hp)
    need = {}
    for module, positions in declared.statistics.items():
        by = {p: missing(lm, hp.layers, hp.mom2_n_tokens, module, p) for p in positions}
        by = {p: layers for p, layers in by.items() if layers}
        if by:
            need[module] = by
    templates = (declared.templates and hp.context_templates > 0
                 and not templates_cached(lm, hp.context_templates, hp.context_length))
    return {"statistics": need, "templates": templates} if need or templates else {}


def prepare_first_use(lm, hps: "Hparams | list[Hparams]", progress=None, method: str | None = None) -> bool:
    """Compute what the first edits with `hps` need (first_use, merged: one statistics pass per module, token
    positions and token count for all their layers) with progress messages and time estimates; True when
    something was computed. The statistics dominate: one pass over mom2_n_tokens WikiText tokens that stops
    after the highest layer (Gemma 3 270M, 20,000 tokens, layer 4: docs/results/speed.md, "First use of a
    method")."""
    hps = list(hps) if isinstance(hps, (list, tuple)) else [hps]
    passes: dict[tuple, set] = {}
    templates: set[tuple[int, int]] = set()
    for hp in hps:
        todo = first_use(lm, hp, method)
        for module, by in todo.get("statistics", {}).items():
            for positions, layers in by.items():
                passes.setdefault((module, positions, hp.mom2_n_tokens), set()).update(layers)
        if todo.get("templates"):
            templates.add((hp.context_templates, hp.context_length))
    if not passes and not templates:
        return False
    say = progress or (lambda f, m: None)
    parts = len(passes) + len(templates)
    done, t0 = 0, time.perf_counter()
    for (module, positions, n_tokens), layers in passes.items():
        what = first_use_words(lm, module, positions, sorted(layers), n_tokens)
        say(done / parts, what)
        second_moment(lm, sorted(layers), n_tokens, module=module, positions=positions,
                      progress=lambda f, m, d=done: say((d + f) / parts, f"first use (once per model): {m}"))
        done += 1
    for n, length in sorted(templates):
        say(done / parts, f"first use (once per model): {n} context templates of {length} tokens generated "
                          "by the model (ROME's prefixes that average a key over contexts)")
        context_templates(lm, n, length, progress=lambda f, m, d=done: say((d + f) / parts, f"first use: {m}"))
        done += 1
    say(1.0, f"first use: ready in {time.perf_counter() - t0:.0f} s (cached for every later edit)")
    return True


def first_use_words(lm, module: str, positions: str, layers: list[int], n_tokens: int) -> str:
    """What a first-use statistics pass computes and about how long it takes, in one sentence."""
    seconds = pass_seconds(lm, layers, n_tokens, module, positions)
    site = ("FFN keys (the down-projection's inputs)" if module == "down_proj"
            else "attention heads' outputs (W_O's inputs)")
    which = "" if positions == "all" else " at named-entity tokens"
    took = f"about {duration(seconds)}" if seconds else "its time is measured on this first pass"
    return (f"first use (once per model): the second moment C = E[k kᵀ] of the {site}{which} at layer"
            f"{'s' if len(layers) > 1 else ''} {', '.join(map(str, layers))}, over {n_tokens:,} WikiText-2 "
            f"tokens, {took}")


def anchor_from_edits(lm, method: str, requests, hparams: dict | None = None, progress=None,
                      quantile: float = 0.95) -> AnchorEstimate:
    """NAS's n_bar for `method` (anchor.py): the mean ||v*|| of its edits on the weights this context sees (upstream:
    the unedited model), norms above `quantile` dropped. Each request is edited alone, so every v* is taken on the
    same weights (ROME would otherwise stack them). The edits run with a placeholder anchor, only to read ||v*||
    before scaling (and ||v* - v||, the shift v_max_norm bounds) from their reports; under
    editing.memo.reuse_targets() later runs reuse their targets."""
    spec = get(method)
    if "nas_anchor" not in {f.name for f in fields(spec.hparams)}:
        raise EditkitError(f"{spec.label} has no norm-anchor option (nas_anchor): it writes no value vector")
    requests = requests if all(hasattr(r, "rewrite") for r in requests) else parse_requests(requests)
    overrides = {**(hparams or {}), "nas_anchor": 1.0, "nas_skip_factor": 0.0}
    norms, shifts = [], []
    for i, request in enumerate(requests):
        sub = part(progress, i / len(requests), (i + 1) / len(requests)) if progress else None
        result = run_edit(lm, spec.name, [request], overrides, progress=sub)
        found = [r.details["nas"] for r in result.per_request if "nas" in r.details]
        if not found:
            raise EditkitError(f"{spec.label} did not report its value norm (nas) for {request.case_id}")
        norms += [f["v_star_norm"] for f in found]
        shifts += [f["shift_norm"] for f in found]
    t = torch.tensor(norms, dtype=torch.float64)
    kept = t[t <= torch.quantile(t, quantile)]
    return AnchorEstimate(float(kept.mean()), len(norms), len(kept), norms, quantile, spec.name, shifts)


__all__ = ["run_edit", "load_hparams", "first_use", "prepare_first_use", "anchor_from_edits"]
