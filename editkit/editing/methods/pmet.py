"""PMET (Li et al. 2023): precise editing of the FFN with the attention's help.

1. At the last critical layer L, optimize two deltas jointly, one on the attention output and one on the MLP output
   at the subject's last token (paper Eq. 10), with the adaptive NLL weight and KL stopping rule of App. D
   (targets.optimize_targets_batch(adaptive=True)).
2. Keep only the FFN target m* = m + delta_mlp: the attention delta shapes the optimisation but is not written
   (the paper's default). `update_attn` is the paper's ablation: the attention target a* = a + delta_attn is also
   written, into each critical layer's attention output projection W_O, with the same spreading rule and W_O's own
   input statistics.
3. Spread the FFN residual over the critical layers with the square root, R_l = (m* - m_L) / sqrt(L - i), and update
   the down-projections with MEMIT's solve Delta = R K^T (lambda C + K K^T)^-1 (spread.py).
Because the targets live at the MLP (and attention) outputs, no post-norm mapping is needed for Gemma.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from ..result import EditResult
from ..spread import Stream, spread
from ..stats import key_statistics
from ..targets import optimize_targets_batch
from . import Method, register
from .memit import MemitHparams, finish, memit_rule


@dataclass(frozen=True)
class PmetHparams(MemitHparams):
    update_attn: bool = False  # the MHSA-update ablation: also write the attention targets into W_O

    SOLVE_ONLY = MemitHparams.SOLVE_ONLY | {"update_attn"}


def apply_pmet(lm, requests, hp: PmetHparams, progress=None, debug: list | None = None,
               reference: bool = False) -> EditResult:
    start = time.perf_counter()
    opts = optimize_targets_batch(lm, list(requests), hp.layers[-1], ("attn_out", "mlp_out"), hp, adaptive=True,
                                  reference=reference,
                                  progress=(lambda f, m: progress(0.5 * f, f"PMET {m}")) if progress else None)
    t_targets = time.perf_counter() - start
    lam = hp.mom2_update_weight
    C = key_statistics(lm, hp.layers, hp)
    streams = [Stream("down_proj", "mlp_key", "mlp_out", torch.stack([o["mlp_out"]["target"] for o in opts], 1),
                      memit_rule(C, lam), C)]
    if hp.update_attn:
        C_O = key_statistics(lm, hp.layers, hp, module="o_proj")
        streams.append(Stream("o_proj", "attn_z", "attn_out",
                              torch.stack([o["attn_out"]["target"] for o in opts], 1), memit_rule(C_O, lam), C_O))
    total, per_layer, reach = spread(lm, requests, hp, streams, divisor=math.sqrt, label="PMET", progress=progress,
                                     debug=debug)
    return finish("pmet", lm, requests, hp, opts, total, per_layer, reach, start, t_targets, progress,
                  attn_delta_norms=[float(o["attn_out"]["delta"].norm()) for o in opts])


METHOD = register(Method(
    name="pmet", label="PMET", apply=apply_pmet, hparams=PmetHparams, order=30, color="#7570b3",
    spreading="MLP-output target spread over the critical layers, R / sqrt(L - i)",
    about="Precise Model Editing in a Transformer (Li et al. 2023): attention and FFN targets optimized together, "
          "only the FFN written."))
