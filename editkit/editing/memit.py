"""MEMIT (Meng et al. 2023) and the batch update it shares with PMET (Li et al. 2023).

For a batch of requests, target residuals z_i are optimized at the output of the last critical layer L (targets.py,
MEMIT Eq. 16). Then for each critical layer l (in order, each update applied before the next layer is processed):
    K   = [k_1 ... k_n]           keys at layer l (template-averaged, subject's last token)      (d_ff, n)
    R   = (Z - H_L) / (L - i)     remaining residual, spread over the layers left (MEMIT Eq. 14-15)  (d_model, n)
    Delta = R K^T (lambda C + K K^T)^-1                                            (MEMIT Eq. 14)
solved as a symmetric linear system in float64 (no explicit inverse).

Gemma 2/3: a block adds post_feedforward_layernorm(m) = s * m / rms(m) (s = 1 + w) to the residual, not the MLP
output m, so MEMIT's "residual change = change of W k" does not hold. editkit maps each layer's residual share r
to the MLP output through that norm: the norm's outputs form the ellipsoid {s * u : rms(u) = 1}, so it takes the
point of that ellipsoid nearest to norm(m) + r (a one-dimensional Lagrange problem, `reachable_output`) and the
MLP output m' = u * rms(m) that produces it, R = m' - m. When norm(m) + r lies on the ellipsoid this is exact;
otherwise the part of r no norm output can reach is dropped, and the later layers, which
recompute the remaining residual at layer L, make up what they can. `info["target_reached"]` reports the result.
"""
from __future__ import annotations

import math
import time

import torch

from .result import EditResult, norm_report
from .stats import second_moment
from .targets import layer_state, optimize_targets_batch
from .weights import apply_delta, restore


def batch_update(K: torch.Tensor, R: torch.Tensor, C: torch.Tensor, lam: float) -> torch.Tensor:
    """Delta = R K^T (lam C + K K^T)^-1, (d_model, d_ff); satisfies Delta (lam C + K K^T) = R K^T."""
    K64, R64 = K.double(), R.double()
    A = lam * C.double() + K64 @ K64.T  # symmetric positive definite (d_ff, d_ff)
    return torch.linalg.solve(A, K64 @ R64.T).T  # A symmetric: (A^-1 K R^T)^T = R K^T A^-1


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def reachable_output(s: torch.Tensor, y: torch.Tensor, iters: int = 100) -> torch.Tensor:
    """The u (d, n) with rms(u) = 1 whose post-norm output s * u is closest to y (d, n), for scale s = 1 + w (d,).

    An RMSNorm's output is s * x / rms(x): whatever the MLP writes, the block adds a point of the ellipsoid
    {s * u : ||u||^2 = d}. The nearest point to y solves min ||s u - y||^2 s.t. ||u||^2 = d; its Lagrange condition
    (s^2 + mu) u = s y gives u_i = s_i y_i / (s_i^2 + mu), with mu > -min s_i^2 found by bisection so that
    ||u||^2 = d (||u(mu)|| decreases in mu). Channels with s_i = 0 cannot be seen after the norm; they take any
    slack (so mu = 0, an exact hit, whenever ||y / s|| on the live channels is at most sqrt(d))."""
    d = s.shape[0]
    s = s.double()[:, None]
    y = y.double()
    live = s.abs() > 1e-6
    s2 = torch.where(live, s * s, torch.zeros_like(s))
    sy = torch.where(live, s * y, torch.zeros_like(y))

    def u_of(mu):
        return torch.where(live, sy / (s2 + mu), torch.zeros_like(sy))

    target = torch.full((1, y.shape[1]), float(d), dtype=torch.float64)
    has_dead = bool((~live).any())
    exact = u_of(torch.zeros_like(target))
    lo = -s2[live].min() * torch.ones_like(target) * (1 - 1e-9)  # ||u|| -> inf as mu -> -min s^2 (if s y != 0)
    hi = torch.ones_like(target)
    while bool((u_of(hi).pow(2).sum(0, keepdim=True) > target).any()):
        hi = hi * 4
    for _ in range(iters):
        mid = (lo + hi) / 2
        too_big = u_of(mid).pow(2).sum(0, keepdim=True) > target
        lo, hi = torch.where(too_big, mid, lo), torch.where(too_big, hi, mid)
    u = u_of(hi)
    if has_dead:  # slack goes to the dead channels: exact whenever the live part fits
        fits = exact.pow(2).sum(0, keepdim=True) <= target
        u = torch.where(fits, exact, u)
        slack = (target - u.pow(2).sum(0, keepdim=True)).clamp_min(0)
        n_dead = float((~live).sum())
        u = torch.where(live, u, torch.sqrt(slack / n_dead).expand_as(u))
    return u


def residual_to_mlp_output(lm, layer: int, m: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The change of the MLP output at `layer` (columns) that moves the residual by r, or as close to r as the
    block allows. Without a post-MLP norm that is r itself. Gemma 2/3 add post_feedforward_layernorm(m) instead: the
    wanted norm output is y = norm(m) + r, the nearest reachable output is s * u (reachable_output), and the MLP
    output m' = u * rms(m) produces it exactly (keeping the scale of m); returns m' - m."""
    norm = lm.adapter.post_mlp_norm(layer)
    if norm is None:
        return r
    eps = getattr(norm, "eps", getattr(norm, "variance_epsilon", 1e-6))
    s = 1.0 + norm.weight.detach().double()
    m64 = m.double()
    rms_m = _rms(m64.T, eps).T  # (1, n)
    y = m64 / rms_m * s[:, None] + r.double()
    u = reachable_output(s, y)
    return u * rms_m - m64


def spread(lm, requests, hp: dict, targets: torch.Tensor, site: str, sqrt: bool, method: str,
           progress=None, start: float = 0.5, debug: list | None = None,
           attn_targets: torch.Tensor | None = None) -> tuple[dict, list, list]:
    """Apply MEMIT/PMET's layer-by-layer update towards `targets` (d_model, n) at `site` of the last layer.

    Returns the total delta {param: tensor}, per-layer diagnostics and, per request, the fraction of the distance
    to the target the update covers at `site` of the last layer (1 = target reached); the model is restored.
    `attn_targets` (d_model, n): also update each critical layer's attention output projection W_O towards these
    attention outputs at the last layer, with the same rule and W_O's own input statistics (PMET's MHSA update)."""
    a, layers = lm.adapter, hp["layers"]
    z_layer = layers[-1]
    stats = second_moment(lm, layers, hp["mom2_n_tokens"])
    attn_stats = second_moment(lm, layers, hp["mom2_n_tokens"], module="o_proj") if attn_targets is not None \
        else None
    total, backups, per_layer = {}, [], []
    start_site = None
    try:
        for i, layer in enumerate(layers):
            if progress:
                progress(start + (1 - start) * i / len(layers), f"{method}: layer {layer}")
            state = layer_state(lm, requests, hp, layer, z_layer, site, attn=attn_targets is not None)
            K, current = state["K"], state["current"]  # (d_ff, n), (d_model, n)
            if start_site is None:
                start_site = current
            remaining = len(layers) - i
            R = (targets - current) / (math.sqrt(remaining) if sqrt else remaining)
            if site == "resid_post":  # a residual target: map it to this layer's MLP output (Gemma's post-norm)
                R = residual_to_mlp_output(lm, layer, state["mlp"], R)
            dW = batch_update(K, R, stats[layer], hp["mom2_update_weight"]).to(a.down_weight(layer).dtype)
            if debug is not None:
                debug.append({"layer": layer, "K": K, "R": R, "C": stats[layer], "delta": dW})
            name = a.name("down_proj", layer) + ".weight"
            delta = {name: dW.T.contiguous() if a.family.conv1d else dW}
            W = a.down_weight(layer).detach()
            per_layer.append({"layer": layer, "residual_norm": float(R.norm(dim=0).mean()),
                              "delta_norm": float(dW.norm()), "weight_norm": float(W.norm()),
                              "relative_norm": float(dW.norm() / W.norm())})
            if attn_targets is not None:  # PMET's ablation: W_O gets its own least-squares update
                R_attn = (attn_targets - state["current_attn"]) / (math.sqrt(remaining) if sqrt else remaining)
                dW_O64 = batch_update(state["K_attn"], R_attn, attn_stats[layer], hp["mom2_update_weight"])
                dW_O = dW_O64.to(a.weight("o_proj", layer).dtype)
                o_name = a.name("o_proj", layer) + ".weight"
                delta[o_name] = dW_O.T.contiguous() if a.family.conv1d else dW_O
                per_layer[-1]["attn_relative_norm"] = float(dW_O.norm() / a.weight("o_proj", layer).detach().norm())
                if debug is not None:
                    debug[-1].update({"K_attn": state["K_attn"], "R_attn": R_attn, "C_attn": attn_stats[layer],
                                      "delta_attn": dW_O64})  # the float64 solve, before the cast
            backups.append(apply_delta(lm.model, delta))  # the next layers see this update
            total.update(delta)
        # How much of the way to the targets the finished update goes, per request: 1 - |z - h_new| / |z - h_old|
        reached = layer_state(lm, requests, hp, z_layer, z_layer, site)["current"]
        per_request = 1 - (targets - reached).norm(dim=0) / (targets - start_site).norm(dim=0).clamp_min(1e-12)
        reach = [round(float(x), 4) for x in per_request]
    finally:
        for backup in reversed(backups):
            restore(lm.model, backup)
    return total, per_layer, reach


def apply_memit(lm, requests, hp: dict, progress=None, debug: list | None = None) -> EditResult:
    start = time.perf_counter()
    z_layer = hp["layers"][-1]
    opts = optimize_targets_batch(lm, list(requests), z_layer, ("resid_post",), hp,
                                  progress=(lambda f, m: progress(0.5 * f, f"MEMIT {m}")) if progress else None)
    zs = [opt["resid_post"]["target"] for opt in opts]
    t_targets = time.perf_counter() - start
    losses = [{"case_id": r.case_id, "losses": opt["losses"]} for r, opt in zip(requests, opts)]
    total, per_layer, reach = spread(lm, requests, hp, torch.stack(zs, 1), "resid_post", sqrt=False, method="MEMIT",
                                     progress=progress, debug=debug)
    info = {"layers": hp["layers"], "per_layer": per_layer, "requests": losses, "target_reached": reach,
            "seconds_targets": round(t_targets, 2), "seconds_spread": round(time.perf_counter() - start - t_targets, 2),
            "norms": norm_report(lm.model, total), "hparams": hp,
            "residual_mapping": "Gemma post-norm inverted" if lm.adapter.family.post_mlp_norm else "identity"}
    if progress:
        progress(1.0, "MEMIT done")
    return EditResult("memit", list(requests), total, info, time.perf_counter() - start)
