"""ROME (Meng et al. 2022): a rank-one update of one MLP down-projection W that makes W k* = v*.

Eq. 2 of the paper, with C = E[k k^T] (stats.py), k* the template-averaged key (Eq. 3) and v* the optimized MLP
output (Eq. 4, targets.py):
    W_hat = W + Lambda (C^-1 k*)^T,   Lambda = (v* - W k*) / ((C^-1 k*)^T k*)
so that W_hat k* = v* exactly. kmeng01/rome used the key of the plain prompt k_p (not k*) in the residual and the
denominator, (v* - W k_p) / (u^T k_p) with u = C^-1 k*; then W_hat k_p = v* instead, and a small u^T k_p blows the
update up (the "disabling edits" bug fixed by r-ROME, Gupta et al. 2024). editkit uses r-ROME unless `rrome` is
false. Requests are applied one after another, each on top of the previous ones (upstream behaviour).
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass

import torch

from ..hparams import Hparams
from ..result import EditResult, norm_report
from ..stats import key_statistics
from ..targets import key_star, keys_at, optimize_targets
from ...weights import applied, effective_weight
from . import Method, register


@dataclass(frozen=True)
class RomeHparams(Hparams):
    mom2_adjustment: bool = True  # C from the statistics (False: C = I, EasyEdit's Llama setting)
    rrome: bool = True  # r-ROME's denominator (k* everywhere); False reproduces kmeng01/rome's k_p

    SOLVE_ONLY = Hparams.SOLVE_ONLY | {"mom2_adjustment", "rrome"}


def rome_update(W: torch.Tensor, b: torch.Tensor | None, C: torch.Tensor, k_star: torch.Tensor,
                v_star: torch.Tensor, k_den: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Delta W (d_model, d_ff) of ROME's Eq. 2; `k_den` (default k*) is the key used in the residual/denominator."""
    k_den = k_star if k_den is None else k_den
    W64, C64 = W.double(), C.double()
    u = torch.linalg.solve(C64, k_star.double())  # C^-1 k*, no explicit inverse
    current_out = W64 @ k_den.double() + (b.double() if b is not None else 0)
    denominator = u @ k_den.double()
    delta = torch.outer(v_star.double() - current_out, u) / denominator
    info = {"division_factor": float(denominator / u.norm()), "denominator": float(denominator)}
    return delta.to(torch.promote_types(W.dtype, torch.float32)), info  # float32 for a half-precision W


def apply_rome(lm, requests, hp: RomeHparams, progress=None, debug: list | None = None,
               reference: bool = False) -> EditResult:
    start = time.perf_counter()
    a = lm.adapter
    layer = hp.layers[0]
    C = key_statistics(lm, [layer], hp, progress=(lambda f, m: progress(0.3 * f, m)) if progress else None)[layer]
    if not hp.mom2_adjustment:
        C = torch.eye(a.d_ff, device=C.device)
    name = a.param_name("down_proj", layer)
    total, details, t_targets = None, [], 0.0
    with ExitStack() as stack:
        for i, request in enumerate(requests):
            if progress:
                progress(0.3 + 0.7 * i / len(requests), f"ROME: request {i + 1}/{len(requests)}")
            k_star = key_star(lm, layer, request, hp)
            t0 = time.perf_counter()
            opt = optimize_targets(lm, request, layer, ("mlp_out",), hp, reference=reference)
            t_targets += time.perf_counter() - t0
            v_star = opt["mlp_out"]["target"]
            k_den = k_star if hp.rrome else keys_at(lm, layer, [(request.rewrite, 0)], request.subject)[0]
            W = effective_weight(lm, "down_proj", layer)
            b = a.down_bias(layer)
            dW, info = rome_update(W, None if b is None else b.detach(), C, k_star, v_star, k_den)
            delta = a.weight_delta("down_proj", layer, dW)
            if debug is not None:
                debug.append({"k_star": k_star, "v_star": v_star, "k_den": k_den, "delta": dW})
            stack.enter_context(applied(lm, delta))  # later requests see this one, as upstream
            total = delta if total is None else {name: total[name] + delta[name]}
            details.append({"case_id": request.case_id, "layer": layer, "losses": opt["losses"], **info,
                            "v_star_norm": float(v_star.norm()), "k_star_norm": float(k_star.norm()),
                            "delta_norm": float(dW.norm()), "weight_norm": float(W.norm()),
                            "relative_norm": float(dW.norm() / W.norm())})
    info = {"layer": layer, "rrome": hp.rrome, "requests": details, "norms": norm_report(lm.model, total),
            "seconds_targets": round(t_targets, 2), "hparams": hp.to_dict()}
    if progress:
        progress(1.0, "ROME done")
    return EditResult("rome", list(requests), total, info, time.perf_counter() - start)


METHOD = register(Method(
    name="rome", label="ROME", apply=apply_rome, hparams=RomeHparams, order=10, batch=False, color="#1b9e77",
    spreading="one layer, a rank-one update per request (Eq. 2)",
    about="Rank-One Model Editing (Meng et al. 2022): W k* = v* at one MLP layer, requests one after another."))
