"""One entry point for every method: run_edit(lm, "rome"|"memit"|"pmet", requests, overrides)."""
from __future__ import annotations

import math

from ..errors import EditkitError
from .hparams import METHODS, load_hparams, validate
from .requests import parse_requests
from .result import EditResult


def _method(name: str):
    if name == "rome":
        from .rome import apply_rome
        return apply_rome
    if name == "memit":
        from .memit import apply_memit
        return apply_memit
    if name == "pmet":
        from .pmet import apply_pmet
        return apply_pmet
    raise EditkitError(f"method must be one of {', '.join(METHODS)}, not {name!r}")


def run_edit(lm, method: str, requests, hparams: dict | None = None, progress=None) -> EditResult:
    """Compute an edit at the model's current weights. The model is left unchanged; apply `result.delta` with
    editkit.editing.weights (apply_delta / applied / EditHistory). `hparams` overrides the per-model file."""
    method = (method or "").lower().strip()
    fn = _method(method)
    requests = parse_requests(requests) if not isinstance(requests, list) or not requests or \
        not all(hasattr(r, "rewrite") for r in requests) else requests
    hp = load_hparams(method, lm, hparams)
    result = fn(lm, requests, hp, progress=progress)
    for name, d in result.delta.items():
        if not bool(d.isfinite().all()):
            raise EditkitError(f"{method} produced a non-finite update for {name}; check the hyperparameters")
    bad = [k for k, v in result.info.get("norms", {}).items() if not math.isfinite(v["relative_norm"])]
    if bad:
        raise EditkitError(f"{method} produced an unusable update for {', '.join(bad)}")
    return result


__all__ = ["run_edit", "METHODS", "load_hparams", "validate"]
