"""MEMIT (Meng et al. 2023) and the batch update it shares with PMET (Li et al. 2023).

For a batch of requests, target residuals z_i are optimized at the output of the last critical layer L (targets.py,
MEMIT Eq. 16). Then for each critical layer l (in order, each update applied before the next layer is processed):
    K   = [k_1 ... k_n]           keys at layer l (template-averaged, subject's last token)      (d_ff, n)
    R   = (Z - H_L) / (L - i)     remaining residual, spread over the layers left (MEMIT Eq. 14-15)  (d_model, n)
    Delta = R K^T (lambda C + K K^T)^-1                                            (MEMIT Eq. 14)
solved as a symmetric linear system in float64 (no explicit inverse).

Gemma 2/3: a block adds post_feedforward_layernorm(mlp(x)) to the residual, so a residual change r is not a change of
the down-projection output. editkit maps it back through that RMSNorm: with m the current MLP output and
y = norm(m) + r the wanted normed output, the new MLP output is m' = (y / (1 + w)) * rms(m) / rms(y / (1 + w)), i.e.
the RMSNorm inverted up to scale, keeping the scale of m (channels with 1 + w = 0 keep their value); R for the solve is then m' - m. A post-RMSNorm output
always has rms(y / (1 + w)) = 1, so the residual actually reached is y / rms(y / (1 + w)): the right direction, but
the part of r that would change that scale is lost (about 12% of r in tests/test_memit_pmet.py's random case).
Each later layer recomputes the remaining residual at layer L, which makes up part of the shortfall; optimizing the
targets at the MLP output instead (as PMET does) would avoid the mapping altogether.
"""
from __future__ import annotations

import math
import time

import torch

from .result import EditResult, norm_report
from .stats import second_moment
from .targets import contexts, keys_at, optimize_targets, site_output
from .weights import apply_delta, restore


def batch_update(K: torch.Tensor, R: torch.Tensor, C: torch.Tensor, lam: float) -> torch.Tensor:
    """Delta = R K^T (lam C + K K^T)^-1, (d_model, d_ff); satisfies Delta (lam C + K K^T) = R K^T."""
    K64, R64 = K.double(), R.double()
    A = lam * C.double() + K64 @ K64.T  # symmetric positive definite (d_ff, d_ff)
    return torch.linalg.solve(A, K64 @ R64.T).T  # A symmetric: (A^-1 K R^T)^T = R K^T A^-1


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def residual_to_mlp_output(lm, layer: int, m: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The change of the MLP output at `layer` that moves the residual by r (columns), for the family's block."""
    norm = lm.adapter.post_mlp_norm(layer)
    if norm is None:
        return r
    eps = getattr(norm, "eps", getattr(norm, "variance_epsilon", 1e-6))
    scale = (1.0 + norm.weight.detach().double())[:, None]
    m64, r64 = m.double(), r.double()
    y = m64 / _rms(m64.T, eps).T * scale + r64  # wanted normed output, (d_model, n)
    # A channel with 1 + w = 0 (Gemma 3 270M has some) is always 0 after the norm: it cannot be steered, so it keeps
    # the current normalized value instead of dividing by zero.
    dead = scale.abs() < 1e-6
    x_dir = torch.where(dead, m64 / _rms(m64.T, eps).T, y / torch.where(dead, torch.ones_like(scale), scale))
    m_new = x_dir * (_rms(m64.T, eps).T / _rms(x_dir.T, eps).T)
    return m_new - m64


def _keys(lm, layer: int, requests, hp) -> torch.Tensor:
    return torch.stack([keys_at(lm, layer, contexts(lm, r, hp), r.subject).mean(0) for r in requests], 1)


def spread(lm, requests, hp: dict, targets: torch.Tensor, site: str, sqrt: bool, method: str,
           progress=None, start: float = 0.5, debug: list | None = None) -> tuple[dict, list]:
    """Apply MEMIT/PMET's layer-by-layer update towards `targets` (d_model, n) at `site` of the last layer.

    Returns the total delta {param: tensor} and per-layer diagnostics; the model is restored on return."""
    a, layers = lm.adapter, hp["layers"]
    z_layer = layers[-1]
    stats = second_moment(lm, layers, hp["mom2_n_tokens"])
    total, backups, per_layer = {}, [], []
    try:
        for i, layer in enumerate(layers):
            if progress:
                progress(start + (1 - start) * i / len(layers), f"{method}: layer {layer}")
            K = _keys(lm, layer, requests, hp)  # (d_ff, n)
            current = torch.stack([site_output(lm, site, z_layer, r) for r in requests], 1)  # (d_model, n)
            remaining = len(layers) - i
            R = (targets - current) / (math.sqrt(remaining) if sqrt else remaining)
            if site == "block":  # a residual target: map it to this layer's MLP output (Gemma's post-norm)
                m = torch.stack([site_output(lm, "mlp", layer, r) for r in requests], 1)
                R = residual_to_mlp_output(lm, layer, m, R)
            dW = batch_update(K, R, stats[layer], hp["mom2_update_weight"]).to(a.down_weight(layer).dtype)
            if debug is not None:
                debug.append({"layer": layer, "K": K, "R": R, "C": stats[layer], "delta": dW})
            name = a.name("down_proj", layer) + ".weight"
            delta = {name: dW.T.contiguous() if a.family.conv1d else dW}
            W = a.down_weight(layer).detach()
            per_layer.append({"layer": layer, "residual_norm": float(R.norm(dim=0).mean()),
                              "delta_norm": float(dW.norm()), "weight_norm": float(W.norm()),
                              "relative_norm": float(dW.norm() / W.norm())})
            backups.append(apply_delta(lm.model, delta))  # the next layers see this update
            total[name] = delta[name]
    finally:
        for backup in reversed(backups):
            restore(lm.model, backup)
    return total, per_layer


def apply_memit(lm, requests, hp: dict, progress=None, debug: list | None = None) -> EditResult:
    start = time.perf_counter()
    z_layer = hp["layers"][-1]
    zs, losses = [], []
    for i, request in enumerate(requests):
        if progress:
            progress(0.5 * i / len(requests), f"MEMIT: target {i + 1}/{len(requests)}")
        opt = optimize_targets(lm, request, z_layer, ("block",), hp)
        zs.append(opt["block"]["target"])
        losses.append({"case_id": request.case_id, "losses": opt["losses"]})
    total, per_layer = spread(lm, requests, hp, torch.stack(zs, 1), "block", sqrt=False, method="MEMIT",
                              progress=progress, debug=debug)
    info = {"layers": hp["layers"], "per_layer": per_layer, "requests": losses,
            "norms": norm_report(lm.model, total), "hparams": hp,
            "residual_mapping": "Gemma post-norm inverted" if lm.adapter.family.post_mlp_norm else "identity"}
    if progress:
        progress(1.0, "MEMIT done")
    return EditResult("memit", list(requests), total, info, time.perf_counter() - start)
