"""ROME (Meng et al. 2022): a rank-one update of one MLP down-projection W that makes W k* = v*.

Eq. 2 of the paper, with C = E[k k^T] (stats.py), k* the template-averaged key and v* the optimized MLP output
(targets.py):
    W_hat = W + Lambda (C^-1 k*)^T,   Lambda = (v* - W k*) / ((C^-1 k*)^T k*)
so that W_hat k* = v* exactly. kmeng01/rome used the key of the plain prompt k_p (not k*) in the residual and the
denominator, (v* - W k_p) / (u^T k_p) with u = C^-1 k*; then W_hat k_p = v* instead, and a small u^T k_p blows the
update up (the "disabling edits" bug fixed by r-ROME, Gupta et al. 2024). editkit uses r-ROME unless
`"rrome": false`. Requests are applied one after another, each on top of the previous ones (upstream behaviour).
"""
from __future__ import annotations

import time

import torch

from .result import EditResult, norm_report
from .stats import second_moment
from .targets import key_star, keys_at, optimize_targets
from .weights import apply_delta, restore


def rome_update(W: torch.Tensor, b: torch.Tensor | None, C: torch.Tensor, k_star: torch.Tensor,
                v_star: torch.Tensor, k_den: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Delta W (d_model, d_ff) of ROME's Eq. 2; `k_den` (default k*) is the key used in the residual/denominator."""
    k_den = k_star if k_den is None else k_den
    W64, C64 = W.double(), C.double()
    u = torch.linalg.solve(C64, k_star.double())  # C^-1 k*, no explicit inverse
    current = W64 @ k_den.double() + (b.double() if b is not None else 0)
    denominator = u @ k_den.double()
    delta = torch.outer(v_star.double() - current, u) / denominator
    info = {"division_factor": float(denominator / u.norm()), "denominator": float(denominator)}
    return delta.to(W.dtype), info


def apply_rome(lm, requests, hp: dict, progress=None, debug: list | None = None) -> EditResult:
    start = time.perf_counter()
    a = lm.adapter
    layer = hp["layers"][0]
    C = second_moment(lm, [layer], hp["mom2_n_tokens"],
                      progress=(lambda f, m: progress(0.3 * f, m)) if progress else None)[layer]
    if not hp.get("mom2_adjustment", True):
        C = torch.eye(a.d_ff, device=C.device)
    name = a.name("down_proj", layer) + ".weight"
    backups, total, details = [], None, []
    try:
        for i, request in enumerate(requests):
            if progress:
                progress(0.3 + 0.7 * i / len(requests), f"ROME: request {i + 1}/{len(requests)}")
            k_star = key_star(lm, layer, request, hp)
            opt = optimize_targets(lm, request, layer, ("mlp_out",), hp)
            v_star = opt["mlp_out"]["target"]
            k_den = k_star if hp.get("rrome", True) else keys_at(lm, layer, [(request.rewrite, 0)], request.subject)[0]
            W, b = a.down_weight(layer).detach(), a.down_bias(layer)
            dW, info = rome_update(W, None if b is None else b.detach(), C, k_star, v_star, k_den)
            delta = {name: dW.T.contiguous() if a.family.conv1d else dW}
            if debug is not None:
                debug.append({"k_star": k_star, "v_star": v_star, "k_den": k_den, "delta": dW})
            backups.append(apply_delta(lm.model, delta))  # later requests see this one, as upstream
            total = delta if total is None else {name: total[name] + delta[name]}
            details.append({"case_id": request.case_id, "layer": layer, "losses": opt["losses"], **info,
                            "v_star_norm": float(v_star.norm()), "k_star_norm": float(k_star.norm()),
                            "delta_norm": float(dW.norm()), "weight_norm": float(W.norm()),
                            "relative_norm": float(dW.norm() / W.norm())})
    finally:
        for backup in reversed(backups):
            restore(lm.model, backup)
    info = {"layer": layer, "rrome": hp.get("rrome", True), "requests": details,
            "norms": norm_report(lm.model, total), "hparams": hp}
    if progress:
        progress(1.0, "ROME done")
    return EditResult("rome", list(requests), total, info, time.perf_counter() - start)
