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

`residual_targets` (an option beside the faithful rule): the distance in step 3 is measured at the MLP output of
layer L, which writes to lower layers never reach (they change the MLP output at L only through its keys). The
option turns the FFN target into a residual target at L, z = h_L + (n(m*) - n(m)) with n Gemma's post-MLP norm
(identity elsewhere), i.e. what the target MLP output adds to the residual, and spreads it with MEMIT's rule
(spread.py: R = (z - h_L) / (L - i), mapped through the post-MLP norm), so every layer's write counts.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from ...core.progress import part
from ..anchor import anchor_targets
from ..keys import site_output
from ..result import EditResult
from ..share import update_share
from ..spread import Stream, finish, memit_rule, spread
from ..stats import cholesky, key_statistics, positions_for
from ..targets import Targets, optimize_targets_batch
from . import FirstUse, Method, register
from .memit import MemitHparams


@dataclass(frozen=True)
class PmetHparams(MemitHparams):
    update_attn: bool = False  # the MHSA-update ablation: also write the attention targets into W_O
    residual_targets: bool = False  # spread the FFN target as a residual target with MEMIT's rule (docstring)

    SOLVE_ONLY = MemitHparams.SOLVE_ONLY | {"update_attn", "residual_targets"}


def residual_targets(lm, requests, opts: list[Targets], layer: int) -> torch.Tensor:
    """z = h_L + n(m*) - n(m) per request (columns, d_model x n): the residual the FFN target m* = m + delta_mlp
    gives at the subject's last token of the plain prompt, with n the post-MLP norm (identity without one)."""
    norm = lm.adapter.post_mlp_norm(layer)
    out = []
    for r, o in zip(requests, opts):
        m, m_star = o.at("mlp_out").init, o.at("mlp_out").target
        h = site_output(lm, "resid_post", layer, r)
        with torch.no_grad():
            if norm is None:
                write = m_star - m
            else:
                dt = next(norm.parameters()).dtype
                write = norm(m_star[None].to(dt))[0].float() - norm(m[None].to(dt))[0].float()
        out.append(h + write)
    return torch.stack(out, 1)


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
    opts = anchor_targets(lm, requests, opts, "mlp_out", hp.layers[-1], hp)  # NAS, when chosen
    t_targets = time.perf_counter() - start
    lam = hp.mom2_update_weight
    C = key_statistics(lm, hp.layers, hp)
    if hp.residual_targets:
        kind, targets = "resid_post", residual_targets(lm, requests, opts, hp.layers[-1])
    else:
        kind, targets = "mlp_out", torch.stack([o.at("mlp_out").target for o in opts], 1)
    factors = {l: cholesky(lm, l, hp, C=C[l]) for l in hp.layers}
    streams = [Stream("down_proj", "mlp_key", kind, targets, memit_rule(C, lam, factors), C)]
    if hp.update_attn:
        C_O = key_statistics(lm, hp.layers, hp, module="o_proj")
        factors_O = {l: cholesky(lm, l, hp, "o_proj", C_O[l]) for l in hp.layers}
        streams.append(Stream("o_proj", "attn_z", "attn_out", torch.stack([o.at("attn_out").target for o in opts], 1),
                              memit_rule(C_O, lam, factors_O), C_O))
    divisor = float if hp.residual_targets else math.sqrt  # MEMIT's L - i for residual targets, else sqrt(L - i)
    done = spread(lm, requests, hp, streams, divisor=divisor, label="PMET", progress=progress, solves=solves)
    return finish("pmet", lm, requests, hp, opts, done, start, t_targets, progress,
                  attn_delta_norms=[float(o.at("attn_out").delta.norm()) for o in opts])


METHOD = register(Method(
    name="pmet", label="PMET", apply=apply_pmet, hparams=PmetHparams, order=30, color="#7570b3",
    first_use=first_use, predict_share=update_share,
    targets=lambda hp: (("attn_out", "mlp_out"), hp.layers[-1], True),
    spreading="MLP-output target spread over the critical layers, R / sqrt(L - i)",
    about="Precise Model Editing in a Transformer (Li et al. 2023): attention and FFN targets optimized together, "
          "only the FFN written."))
