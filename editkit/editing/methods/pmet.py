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

from ...progress import part
from ..result import EditResult
from ..share import update_share
from ..spread import Stream, finish, memit_rule, spread
from ..stats import key_statistics, positions_for
from ..targets import optimize_targets_batch
from . import FirstUse, Method, register
from .memit import MemitHparams


@dataclass(frozen=True)
class PmetHparams(MemitHparams):
    update_attn: bool = False  # the MHSA-update ablation: also write the attention targets into W_O

    SOLVE_ONLY = MemitHparams.SOLVE_ONLY | {"update_attn"}


def first_use(hp: PmetHparams) -> FirstUse:
    """The down-projection's key statistics, and W_O's inputs' with the MHSA-update ablation."""
    modules = ("down_proj", "o_proj") if hp.update_attn else ("down_proj",)
    return FirstUse({m: positions_for(hp) for m in modules}, templates=True)


def apply_pmet(lm, requests, hp: PmetHparams, progress=None, reference: bool = False,
               solves: bool = False) -> EditResult:
    start = time.perf_counter()
    opts = optimize_targets_batch(lm, list(requests), hp.layers[-1], ("attn_out", "mlp_out"), hp, adaptive=True,
                                  reference=reference,
                                  progress=part(progress, 0, 0.5, "PMET ") if progress else None)
    t_targets = time.perf_counter() - start
    lam = hp.mom2_update_weight
    C = key_statistics(lm, hp.layers, hp)
    streams = [Stream("down_proj", "mlp_key", "mlp_out", torch.stack([o["mlp_out"]["target"] for o in opts], 1),
                      memit_rule(C, lam), C)]
    if hp.update_attn:
        C_O = key_statistics(lm, hp.layers, hp, module="o_proj")
        streams.append(Stream("o_proj", "attn_z", "attn_out",
                              torch.stack([o["attn_out"]["target"] for o in opts], 1), memit_rule(C_O, lam), C_O))
    done = spread(lm, requests, hp, streams, divisor=math.sqrt, label="PMET", progress=progress, solves=solves)
    return finish("pmet", lm, requests, hp, opts, done, start, t_targets, progress,
                  attn_delta_norms=[float(o["attn_out"]["delta"].norm()) for o in opts])


METHOD = register(Method(
    name="pmet", label="PMET", apply=apply_pmet, hparams=PmetHparams, order=30, color="#7570b3",
    first_use=first_use, predict_share=update_share,
    spreading="MLP-output target spread over the critical layers, R / sqrt(L - i)",
    about="Precise Model Editing in a Transformer (Li et al. 2023): attention and FFN targets optimized together, "
          "only the FFN written."))
