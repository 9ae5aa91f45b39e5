"""MEMIT (Meng et al. 2023): many facts at once, spread over a window of MLP layers.

1. Target residuals z_i = h_L + delta_i at the last critical layer L, one per request, optimized jointly
   (targets.py, MEMIT Eq. 16).
2. For each critical layer l in order (spread.py, Alg. 1): keys K at l, what is left R = (Z - H_L) / (L - i)
   (Eq. 14-15; on Gemma mapped through the post-MLP norm), and the update of Eq. 14,
       Delta = R K^T (lambda C + K K^T)^-1,
   the least-squares change that writes the new memories while preserving the statistics C = E[k k^T] of keys
   from ordinary text (lambda = `mom2_update_weight`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..hparams import Hparams, _non_negative
from ..result import EditResult, norm_report
from ..spread import Stream, batch_update, spread
from ..stats import key_statistics
from ..targets import optimize_targets_batch
from . import Method, register


@dataclass(frozen=True)
class MemitHparams(Hparams):
    mom2_update_weight: float = 15000.0  # lambda of Eq. 14: how strongly C's keys are preserved

    CHECKS = {**Hparams.CHECKS, "mom2_update_weight": _non_negative}
    SOLVE_ONLY = Hparams.SOLVE_ONLY | {"mom2_update_weight"}


def memit_rule(C: dict, lam: float):
    """MEMIT Eq. 14 at each layer: Delta = R K^T (lam C + K K^T)^-1."""
    return lambda layer, K, R: batch_update(K, R, C[layer], lam)


def optimize_residual_targets(lm, requests, hp, progress=None, reference=False, label="MEMIT") -> list[dict]:
    return optimize_targets_batch(lm, list(requests), hp.layers[-1], ("resid_post",), hp, reference=reference,
                                  progress=(lambda f, m: progress(0.5 * f, f"{label} {m}")) if progress else None)


def finish(name: str, lm, requests, hp, opts, total, per_layer, reach, start, t_targets, progress=None, **extra):
    """The EditResult of a spread edit, with the diagnostics every spreading method reports."""
    losses = [{"case_id": r.case_id, "losses": opt["losses"]} for r, opt in zip(requests, opts)]
    info = {"layers": list(hp.layers), "per_layer": per_layer, "requests": losses, "target_reached": reach,
            "seconds_targets": round(t_targets, 2),
            "seconds_spread": round(time.perf_counter() - start - t_targets, 2),
            "norms": norm_report(lm.model, total), "hparams": hp.to_dict(), **extra}
    if progress:
        progress(1.0, f"{name} done")
    return EditResult(name, list(requests), total, info, time.perf_counter() - start)


def apply_memit(lm, requests, hp: MemitHparams, progress=None, debug: list | None = None,
                reference: bool = False) -> EditResult:
    start = time.perf_counter()
    opts = optimize_residual_targets(lm, requests, hp, progress, reference)
    t_targets = time.perf_counter() - start
    C = key_statistics(lm, hp.layers, hp)
    targets = torch.stack([opt["resid_post"]["target"] for opt in opts], 1)
    stream = Stream("down_proj", "mlp_key", "resid_post", targets, memit_rule(C, hp.mom2_update_weight), C)
    total, per_layer, reach = spread(lm, requests, hp, [stream], divisor=float, label="MEMIT", progress=progress,
                                     debug=debug)
    mapping = "post-MLP norm inverted" if lm.adapter.family.post_mlp_norm else "identity"
    return finish("memit", lm, requests, hp, opts, total, per_layer, reach, start, t_targets, progress,
                  residual_mapping=mapping)


METHOD = register(Method(
    name="memit", label="MEMIT", apply=apply_memit, hparams=MemitHparams, order=20, color="#d95f02",
    spreading="residual spread over the critical layers, R / (L - i) (Eq. 14-15)",
    about="Mass-Editing Memory in a Transformer (Meng et al. 2023): a batch of facts over a window of MLP layers."))
