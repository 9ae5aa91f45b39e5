"""AlphaEdit's null space (Fang et al. 2025, Sec. 3.2; jianghoucheng/AlphaEdit experiments/evaluate.py `get_project`).

With C = E[k k^T] = U diag(e) U^T (stats.py), the eigen-directions whose eigenvalue is small are those ordinary text
barely uses; P = U0 U0^T projects onto them, and an update Delta P leaves every key in the span of the other
eigenvectors unchanged. Which eigenvalues count as "small" is a rule (NULL_RULES). Both the eigendecomposition and
each projector are cache entries beside C (the same store, keyed by C's own parameters).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..core.errors import EditkitError
from .stats import STORE, key_width, second_moment

NULL_RULES = {
    "absolute": "eigenvalue < threshold (upstream AlphaEdit: 2e-2 for GPT-2 XL, GPT-J and Llama3-8B statistics)",
    "relative": "eigenvalue < threshold x the largest eigenvalue",
    "energy": "the smallest eigen-directions whose eigenvalues sum to at most threshold x trace C = E||k||^2: the "
              "keys of ordinary text keep at most that fraction of their squared norm where the update acts",
}


def _read_tensors(path: Path, names: tuple[str, ...], d: int) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        out = {n: f.get_tensor(n).clone() for n in names}
        meta = json.loads(f.metadata()["info"])
    if any(t.shape[0] != d or not torch.isfinite(t).all() for t in out.values()):
        raise ValueError("bad shape or values")
    return {**out, "info": meta}


def _write_tensors(tmp: Path, value: dict) -> None:
    from safetensors.torch import save_file

    tensors = {k: v.contiguous().cpu() for k, v in value.items() if k != "info"}
    save_file(tensors, str(tmp), metadata={"info": json.dumps(value["info"])})


def eigen(lm, layer: int, n_tokens: int = 20000, module: str = "down_proj") -> tuple[torch.Tensor, torch.Tensor]:
    """C = U diag(e) U^T for the statistics of `layer`: (e ascending, U), float64, cached beside C."""
    path = STORE.path(f"eigen-layer{layer}", ".safetensors", within=lm.name, module=module, corpus="wikitext2-valid",
                      n_tokens=n_tokens)
    d = key_width(lm, module)

    def build():
        C = second_moment(lm, [layer], n_tokens, module=module)[layer].double().cpu()
        e, U = torch.linalg.eigh(C)  # C is symmetric: eigh, not upstream's SVD (the same for a PSD matrix)
        return {"e": e, "U": U, "info": {"layer": layer, "module": module, "n_tokens": n_tokens}}

    hit = STORE.get_or_build(path, build, lambda p: _read_tensors(p, ("e", "U"), d), _write_tensors)
    return hit["e"], hit["U"]


def null_dimension(e: torch.Tensor, rule: str, threshold: float) -> int:
    """How many of the eigenvalues e (ascending) fall in the null space under `rule` (NULL_RULES)."""
    if rule not in NULL_RULES:
        raise EditkitError(f"null-space rule must be one of {', '.join(NULL_RULES)}, not {rule!r}")
    e = e.double().clamp_min(0)  # a PSD matrix; rounding can leave tiny negative eigenvalues
    if rule == "absolute":
        return int((e < threshold).sum())
    if rule == "relative":
        return int((e < threshold * e.max()).sum())
    return int((e.cumsum(0) <= threshold * e.sum()).sum())


def _null_info(e: torch.Tensor, layer: int, rule: str, threshold: float) -> dict:
    k = null_dimension(e, rule, threshold)
    ep = e.clamp_min(0)
    return {"layer": layer, "rule": rule, "threshold": float(threshold), "dimension": k, "width": int(e.numel()),
            "largest_null_eigenvalue": float(ep[k - 1]) if k else None,
            "null_energy": float(ep[:k].sum() / ep.sum()) if k else 0.0}


def null_space_basis(lm, layer: int, rule: str, threshold: float,
                     n_tokens: int = 20000) -> tuple[torch.Tensor, dict]:
    """U0 (d, k, float64): orthonormal eigenvectors of C spanning AlphaEdit's null space (P = U0 U0^T), and the
    summary of null_space_projector."""
    e, U = eigen(lm, layer, n_tokens)
    info = _null_info(e, layer, rule, threshold)
    return U[:, :info["dimension"]].to(lm.device), info


def null_space_projector(lm, layer: int, rule: str, threshold: float,
                         n_tokens: int = 20000) -> tuple[torch.Tensor, dict]:
    """AlphaEdit's P = U0 U0^T (d, d, float64) onto the eigen-directions of C selected by `rule`, and a JSON
    summary (null-space dimension, the eigenvalue cut, the share of trace C inside the null space). Cached."""
    null_dimension(torch.zeros(1), rule, threshold)  # an unknown rule fails before any work
    path = STORE.path(f"projector-layer{layer}", ".safetensors", within=lm.name, module="down_proj",
                      corpus="wikitext2-valid", n_tokens=n_tokens, rule=rule, threshold=float(threshold))

    def build():
        e, U = eigen(lm, layer, n_tokens)
        info = _null_info(e, layer, rule, threshold)
        U0 = U[:, :info["dimension"]]
        return {"P": U0 @ U0.T, "info": info}

    hit = STORE.get_or_build(path, build, lambda p: _read_tensors(p, ("P",), key_width(lm, "down_proj")),
                             _write_tensors)
    return hit["P"].to(lm.device), hit["info"]
