"""One entry point for every registered method (editing/methods/): run_edit(lm, name, requests, overrides).

The result's delta is not applied: the model is never changed. Use it in a computation with
`weights.applied(lm, result.delta)` (or `isolation.session(lm, [..., result.delta])`), save it with
`weights.save_patch`.
"""
from __future__ import annotations

import math

from ..errors import EditkitError
from .context import context_templates, templates_cached
from .defaults import load_hparams
from .hparams import Hparams
from .methods import get, names
from .requests import parse_requests
from .result import EditResult
from .stats import missing, second_moment


def run_edit(lm, method: str, requests, hparams: "dict | Hparams | None" = None, progress=None,
             reference: bool = False, state=None) -> EditResult:
    """Compute an edit at the weights this context sees (base + any active session deltas). `hparams` overrides
    the per-model defaults (a dict), or is the method's complete typed hyperparameters. `reference` runs the target
    optimisation on the plain full model (a benchmark switch; same result, slower). `state` is the
    SequenceState of an ongoing sequence (editing/sequence.py), for stateful methods (others ignore it); the
    result's `state` is the next one."""
    spec = get(method)
    if not isinstance(requests, list) or not requests or not all(hasattr(r, "rewrite") for r in requests):
        requests = parse_requests(requests)
    hp = hparams if isinstance(hparams, spec.hparams) else load_hparams(spec.name, lm, hparams)
    if prepare(lm, hp, (lambda f, m: progress(0.5 * f, m)) if progress else None) and progress:
        inner = progress
        progress = lambda f, m: inner(0.5 + 0.5 * f, m)  # noqa: E731 - the edit itself takes the second half
    extra = {"state": state} if spec.stateful else {}
    result = spec.apply(lm, requests, hp, progress=progress, reference=reference, **extra)
    for name, d in result.delta.items():
        if not bool(d.isfinite().all()):
            raise EditkitError(f"{spec.name} produced a non-finite update for {name}; check the hyperparameters")
    bad = [k for k, v in result.info.get("norms", {}).items() if not math.isfinite(v["relative_norm"])]
    if bad:
        raise EditkitError(f"{spec.name} produced an unusable update for {', '.join(bad)}")
    return result


def first_use(lm, hp) -> dict:
    """What an edit with `hp` still has to compute before it can start (empty on every edit but the first):
    {"statistics": {module: {positions: [layers]}}, "templates": bool}. Statistics: the down-projection keys of
    hp.layers (not with ROME's mom2_adjustment false), W_O's inputs with PMET's update_attn; over all tokens and,
    with mom2_entity_weight, over entity tokens too."""
    need = {}
    positions = ["all"] + (["entities"] if getattr(hp, "mom2_entity_weight", 0) else [])
    if getattr(hp, "mom2_adjustment", True):
        need["down_proj"] = {p: missing(lm, hp.layers, hp.mom2_n_tokens, "down_proj", p) for p in positions}
    if getattr(hp, "update_attn", False):
        need["o_proj"] = {p: missing(lm, hp.layers, hp.mom2_n_tokens, "o_proj", p) for p in positions}
    need = {m: {p: l for p, l in by.items() if l} for m, by in need.items()}
    need = {m: by for m, by in need.items() if by}
    templates = hp.context_templates > 0 and not templates_cached(lm, hp.context_templates, hp.context_length)
    return {"statistics": need, "templates": templates} if need or templates else {}


def prepare(lm, hp, progress=None) -> bool:
    """Compute what a first edit needs (first_use) with progress messages and time estimates; True when
    something was computed. The statistics dominate: one pass over mom2_n_tokens WikiText tokens that stops
    after the highest edited layer (Gemma 3 270M, 20,000 tokens, layer 4: see README, "the first edit")."""
    todo = first_use(lm, hp)
    if not todo:
        return False
    say = progress or (lambda f, m: None)
    parts = sum(len(by) for by in todo["statistics"].values()) + bool(todo.get("templates"))
    done = 0
    for module, by in todo["statistics"].items():
        for positions, layers in by.items():
            second_moment(lm, layers, hp.mom2_n_tokens, module=module, positions=positions,
                          progress=lambda f, m, d=done: say((d + f) / parts, f"first use: {m}"))
            done += 1
    if todo.get("templates"):
        context_templates(lm, hp.context_templates, hp.context_length,
                          progress=lambda f, m: say((done + f) / parts, f"first use: {m}"))
    say(1.0, "first use: ready")
    return True


def methods() -> list[str]:
    return names()


__all__ = ["run_edit", "methods", "load_hparams", "first_use", "prepare"]
