"""PMET (Li et al. 2023): precise editing of the FFN with the attention's help.

1. At the last critical layer L, optimize two deltas jointly, one on the attention output and one on the MLP output
   at the subject's last token (paper Eq. 10), with the adaptive NLL weight and KL stopping rule of App. D
   (targets.optimize_targets(adaptive=True)).
2. Keep only the FFN target m* = m + delta_mlp: the attention delta shapes the optimisation but is not written
   (the paper's default). `"update_attn": true` is the paper's ablation: the attention target a* = a + delta_attn is
   also written, into each critical layer's attention output projection W_O, with the same spreading rule and
   W_O's own input statistics.
3. Spread the FFN residual over the critical layers with the square root, R_l = (m* - m_L) / sqrt(L - i), and update
   the down-projections with MEMIT's batch solve Delta = R K^T (lambda C + K K^T)^-1 (memit.batch_update).
Because the target lives at the MLP output, no RMSNorm mapping is needed for Gemma.
"""
from __future__ import annotations

import time

import torch

from .memit import spread
from .result import EditResult, norm_report
from .targets import optimize_targets_batch


def apply_pmet(lm, requests, hp: dict, progress=None, debug: list | None = None) -> EditResult:
    start = time.perf_counter()
    z_layer = hp["layers"][-1]
    opts = optimize_targets_batch(lm, list(requests), z_layer, ("attn_out", "mlp_out"), hp, adaptive=True,
                                  progress=(lambda f, m: progress(0.5 * f, f"PMET {m}")) if progress else None)
    targets = [opt["mlp_out"]["target"] for opt in opts]
    attn_targets = torch.stack([opt["attn_out"]["target"] for opt in opts], 1) if hp.get("update_attn") else None
    t_targets = time.perf_counter() - start
    attn_norms = [float(opt["attn_out"]["delta"].norm()) for opt in opts]
    losses = [{"case_id": r.case_id, "losses": opt["losses"]} for r, opt in zip(requests, opts)]
    total, per_layer, reach = spread(lm, requests, hp, torch.stack(targets, 1), "mlp_out", sqrt=True, method="PMET",
                                     progress=progress, debug=debug, attn_targets=attn_targets)
    info = {"layers": hp["layers"], "per_layer": per_layer, "requests": losses, "attn_delta_norms": attn_norms,
            "target_reached": reach, "seconds_targets": round(t_targets, 2),
            "seconds_spread": round(time.perf_counter() - start - t_targets, 2),
            "norms": norm_report(lm.model, total), "hparams": hp}
    if progress:
        progress(1.0, "PMET done")
    return EditResult("pmet", list(requests), total, info, time.perf_counter() - start)
