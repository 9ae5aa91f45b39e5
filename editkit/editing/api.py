"""One entry point for every registered method (editing/methods/): run_edit(lm, name, requests, overrides).

The result's delta is not applied: the model is never changed. Use it in a computation with
`weights.applied(lm, result.delta)` (or `isolation.session(lm, [..., result.delta])`), save it with
`weights.save_patch`.
"""
from __future__ import annotations

import math

from ..errors import EditkitError
from .hparams import Hparams, load_hparams
from .methods import get, names
from .requests import parse_requests
from .result import EditResult


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
    extra = {"state": state} if spec.stateful else {}
    result = spec.apply(lm, requests, hp, progress=progress, reference=reference, **extra)
    for name, d in result.delta.items():
        if not bool(d.isfinite().all()):
            raise EditkitError(f"{spec.name} produced a non-finite update for {name}; check the hyperparameters")
    bad = [k for k, v in result.info.get("norms", {}).items() if not math.isfinite(v["relative_norm"])]
    if bad:
        raise EditkitError(f"{spec.name} produced an unusable update for {', '.join(bad)}")
    return result


def methods() -> list[str]:
    return names()


__all__ = ["run_edit", "methods", "load_hparams"]
