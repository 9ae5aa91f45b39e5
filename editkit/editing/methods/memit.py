"""MEMIT (Meng et al. 2023): many facts at once, spread over a window of MLP layers.

1. Target residuals z_i = h_L + delta_i at the last critical layer L, one per request, optimized jointly
   (targets.py, MEMIT Eq. 16).
2. For each critical layer l in order (spread.py, Alg. 1): keys K at l, what is left R = (Z - H_L) / (L - i)
   (Eq. 14-15; on Gemma mapped through the post-MLP norm), and the update of Eq. 14,
       Delta = R K^T (lambda C + K K^T)^-1,
   the least-squares change that writes the new memories while preserving the statistics C = E[k k^T] of keys
   from ordinary text (lambda = `mom2_update_weight`).
ENCORE (Gupta et al. 2025, scalable-model-editing/encore `encore_main.py`), off by default: its early stop is
`v_stop_top1` (targets.py); its norm constraint `update_norm_lambda` adds lambda_n ||Delta||_F^2 to Eq. 14's
objective, and `add_prev_edits` preserves the earlier edits' keys of a sequence (kept in its SequenceState):
   Delta = R K^T (lambda C + lambda_n I + K_p K_p^T + K K^T)^-1.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ..hparams import Hparams, _non_negative
from ..result import EditResult
from ..sequence import SequenceState
from ..share import update_share
from ..spread import Stream, finish, memit_rule, optimize_residual_targets, residual_mapping, spread
from ..stats import cholesky, key_statistics, positions_for
from . import FirstUse, Method, register


@dataclass(frozen=True)
class MemitHparams(Hparams):
    mom2_update_weight: float = 15000.0  # lambda of Eq. 14: how strongly C's keys are preserved
    update_norm_lambda: float = 0.0  # ENCORE's lambda_n: + lambda_n ||Delta||_F^2 in Eq. 14's objective (0: off)
    add_prev_edits: bool = False  # ENCORE's: the earlier edits' keys of a sequence are preserved too (K_p K_p^T)

    CHECKS = {**Hparams.CHECKS, "mom2_update_weight": _non_negative, "update_norm_lambda": _non_negative}
    SOLVE_ONLY = Hparams.SOLVE_ONLY | {"mom2_update_weight", "update_norm_lambda", "add_prev_edits"}
    NEUTRAL = {**Hparams.NEUTRAL, "update_norm_lambda": 0.0, "add_prev_edits": False}


def first_use(hp: MemitHparams) -> FirstUse:
    return FirstUse({"down_proj": positions_for(hp)}, templates=True)


def apply_memit(lm, requests, hp: MemitHparams, progress=None, reference: bool = False,
                solves: bool = False, joint=None, state: SequenceState | None = None,
                method: str = "memit") -> EditResult:
    """`joint`: requests that share one target delta (co-edit's joint targets; joint.Joint). `state`: the
    sequence so far (its earlier keys, with `add_prev_edits`); the result's state adds this batch's keys."""
    start = time.perf_counter()
    state = state if state is not None else SequenceState(method)
    state.check(method)
    opts = optimize_residual_targets(lm, requests, hp, progress, reference, joint=joint)
    t_targets = time.perf_counter() - start
    C = key_statistics(lm, hp.layers, hp)
    factors = {l: cholesky(lm, l, hp, C=C[l]) for l in hp.layers}
    targets = torch.stack([opt.at("resid_post").target for opt in opts], 1)
    used: dict[int, torch.Tensor] = {}
    plain = memit_rule(C, hp.mom2_update_weight, factors, hp.update_norm_lambda,
                       state.keys if hp.add_prev_edits else None)

    def rule(layer, K, R):
        used[layer] = K  # the key after the whole edit: only the layers below change it, and they are applied
        return plain(layer, K, R)

    stream = Stream("down_proj", "mlp_key", "resid_post", targets, rule, C)
    done = spread(lm, requests, hp, [stream], divisor=float, label="MEMIT", progress=progress, solves=solves)
    result = finish(method, lm, requests, hp, opts, done, start, t_targets, progress,
                    residual_mapping=residual_mapping(lm))
    result.state = state.with_keys(used, len(requests)) if hp.add_prev_edits else None
    return result


METHOD = register(Method(
    name="memit", label="MEMIT", apply=apply_memit, hparams=MemitHparams, order=20, color="#d95f02",
    stateful=True, first_use=first_use, predict_share=update_share,
    targets=lambda hp: (("resid_post",), hp.layers[-1], False),
    spreading="residual spread over the critical layers, R / (L - i) (Eq. 14-15)",
    about="Mass-Editing Memory in a Transformer (Meng et al. 2023): a batch of facts over a window of MLP layers."))
