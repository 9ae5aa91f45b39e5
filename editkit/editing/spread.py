"""Spreading an edit over several layers (MEMIT, Meng et al. 2023, Alg. 1): the machinery MEMIT, PMET and AlphaEdit
share, each with its own targets and update rule (`optimize_residual_targets`, `spread`, `finish`).

Targets are given at one site of the last critical layer L (MEMIT: the residual h_L; PMET: the MLP output). For
each critical layer l, in order, with every earlier layer's update already in place:
    K  = [k_1 ... k_n]            keys at layer l (template-averaged, subject's last token)     (d_in, n)
    R  = (Z - H_L) / divisor      what is left to do, spread over the layers left              (d_out, n)
                                  (MEMIT Eq. 14-15: divisor L - i; PMET: sqrt(L - i))
    dW = rule(l, K, R)            the method's solve (MEMIT Eq. 14: R K^T (lambda C + K K^T)^-1;
                                  AlphaEdit Eq. 14: projected onto the null space of the preserved keys)
Each update is applied to this computation only (weights.applied) before the next layer's keys are read, and the
model is never changed. A `Stream` is one linear map edited this way: the FFN down-projection by default, and W_O
as well for PMET's MHSA-update ablation.

Gemma 2/3: a block adds post_feedforward_layernorm(m) = s * m / rms(m) to the residual, not the MLP output m, so
"residual change = change of W k" does not hold. For residual targets each layer's share r is mapped to the MLP
output through that norm: the norm's outputs form the ellipsoid {s * u : rms(u) = 1}, so the point of it nearest
to norm(m) + r is taken (a one-dimensional Lagrange problem, `reachable_output`) and the MLP output m' = u * rms(m)
that produces it, R = m' - m. When norm(m) + r lies on the ellipsoid this is exact; otherwise the part of r no norm
output can reach is dropped, and later layers, which recompute what is left at layer L, make up what they can.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..core.progress import part
from ..model.weights import applied, effective_weight
from .anchor import anchor_targets
from .keys import SiteReader
from .result import EditResult, LayerReport, RequestReport, Solve, norm_report
from .targets import Targets, optimize_targets_batch


def batch_update(K: torch.Tensor, R: torch.Tensor, C: torch.Tensor, lam: float,
                 L: torch.Tensor | None = None, ridge: float = 0.0,
                 prior_keys: torch.Tensor | None = None) -> torch.Tensor:
    """MEMIT Eq. 14: Delta = R K^T (lam C + K K^T)^-1, (d_out, d_in), in float64; satisfies the normal equations
    Delta (lam C + K K^T) = R K^T. With C's Cholesky factor L (stats.cholesky, lam > 0), by the Woodbury identity:
    with Y = C^-1 K and M = lam I + K^T Y (n x n), (lam C + K K^T)^-1 K = Y M^-1, so Delta = R M^-1 Y^T, two
    triangular solves and an n x n one instead of a d x d factorization per layer and edit.
    ENCORE's terms (Gupta et al. 2025, `encore_main.py`: `cov += update_norm_lambda * I`, and with
    `add_prev_edits` the earlier edits' K_p K_p^T): `ridge` lambda_n adds lambda_n ||Delta||_F^2 to Eq. 14's
    objective and `prior_keys` K_p (d_in, m) preserve the earlier edits' keys, so that
    Delta (lam C + lambda_n I + K_p K_p^T + K K^T) = R K^T (solved directly)."""
    K64, R64 = K.double(), R.double()
    if ridge > 0 or prior_keys is not None:
        A = lam * C.double() + K64 @ K64.T
        A = A + ridge * torch.eye(A.shape[0], dtype=torch.float64, device=A.device)
        if prior_keys is not None:
            Kp = prior_keys.to(K64.device, torch.float64)
            A = A + Kp @ Kp.T
        return torch.linalg.solve(A, K64 @ R64.T).T
    if L is not None and lam > 0:
        Y = torch.cholesky_solve(K64, L.double())
        M = lam * torch.eye(K64.shape[1], dtype=torch.float64, device=K64.device) + K64.T @ Y
        return (Y @ torch.linalg.solve(M, R64.T)).T  # M symmetric: R M^-1 Y^T = (Y M^-1 R^T)^T
    A = lam * C.double() + K64 @ K64.T  # symmetric positive definite (d_in, d_in)
    return torch.linalg.solve(A, K64 @ R64.T).T  # A symmetric: (A^-1 K R^T)^T = R K^T A^-1


def memit_rule(C: dict, lam: float, factors: dict | None = None, ridge: float = 0.0, prior=None):
    """MEMIT Eq. 14 at each layer: Delta = R K^T (lam C + K K^T)^-1 (MEMIT's and PMET's solve); `factors`: each
    layer's Cholesky factor of C (stats.cholesky), or None; `ridge` and `prior` (layer -> the earlier edits' keys
    or None): ENCORE's terms (batch_update)."""
    return lambda layer, K, R: batch_update(K, R, C[layer], lam, (factors or {}).get(layer), ridge,
                                            prior(layer) if prior else None)


def reachable_output(s: torch.Tensor, y: torch.Tensor, iters: int = 100) -> torch.Tensor:
    """The u (d, n) with rms(u) = 1 whose post-norm output s * u is closest to y (d, n), for the norm's scale s (d,).

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

    target = torch.full((1, y.shape[1]), float(d), dtype=torch.float64, device=y.device)
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
    if bool((~live).any()):  # slack goes to the dead channels: exact whenever the live part fits
        fits = exact.pow(2).sum(0, keepdim=True) <= target
        u = torch.where(fits, exact, u)
        slack = (target - u.pow(2).sum(0, keepdim=True)).clamp_min(0)
        n_dead = float((~live).sum())
        u = torch.where(live, u, torch.sqrt(slack / n_dead).expand_as(u))
    return u


def residual_to_mlp_output(lm, layer: int, m: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """The change of the MLP output at `layer` (columns) that moves the residual by r, or as close to r as the
    block allows. Without a post-MLP norm that is r itself. With one (Gemma 2/3) the wanted norm output is
    y = norm(m) + r, the nearest reachable output is s * u (reachable_output), and the MLP output m' = u * rms(m)
    produces it exactly (keeping the scale of m); returns m' - m. The norm's scale and eps come from the adapter."""
    norm = lm.adapter.post_mlp_norm(layer)
    if norm is None:
        return r
    s, eps = lm.adapter.norm_scale(norm)
    s = s.double()
    m64 = m.double()
    rms_m = torch.sqrt(m64.pow(2).mean(0, keepdim=True) + eps)  # (1, n)
    y = m64 / rms_m * s[:, None] + r.double()
    return reachable_output(s, y) * rms_m - m64


Rule = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]  # (layer, K, R) -> dW (d_out, d_in)


@dataclass
class Stream:
    """One linear map updated layer by layer towards targets at a site of the last critical layer."""

    part: str  # the adapter's linear part: "down_proj" (the FFN) or "o_proj" (W_O)
    key: str  # site kind of its input: "mlp_key" or "attn_z"
    target: str  # site kind where the targets live: "resid_post", "mlp_out" or "attn_out"
    targets: torch.Tensor  # (d_model, n)
    rule: Rule
    stats: dict | None = None  # layer -> the key statistics C the rule uses (diagnostics only)


@dataclass(kw_only=True)
class LeastSquaresSolve(Solve):
    """One layer's update of a spread edit: dW = rule(layer, K, R) (MEMIT Eq. 14 and its variants)."""

    K: torch.Tensor  # the keys at this layer (d_in, n), template-averaged
    R: torch.Tensor  # what this layer is asked to write (d_out, n)


@dataclass
class Spread:
    """What `spread` computed: the total delta, per layer and map its report (and, when asked, its solve), and per
    request the share of the distance to the first stream's target covered at the last layer (1 = reached)."""

    delta: dict
    layers: list[LayerReport] = field(default_factory=list)
    reached: list[float] = field(default_factory=list)
    solves: list[LeastSquaresSolve] = field(default_factory=list)


def spread(lm, requests, hp, streams: list[Stream], divisor: Callable[[int], float], label: str = "MEMIT",
           progress=None, start: float = 0.5, solves: bool = False) -> Spread:
    """Update every stream at every critical layer hp.layers (see module docstring); `solves` keeps each layer's
    K, R, C and float64 update. The model is left unchanged."""
    a, layers = lm.adapter, list(hp.layers)
    z_layer = layers[-1]
    out, start_values = Spread({}), {}
    reader = SiteReader(lm, requests, hp)  # each read after an edit at layer l runs only blocks l..z_layer
    with ExitStack() as stack:
        for i, layer in enumerate(layers):
            if progress:
                progress(start + (1 - start) * i / len(layers), f"{label}: layer {layer}")
            averaged = {f"K{j}": f"{s.key}.{layer}" for j, s in enumerate(streams)}
            plain = {f"current{j}": f"{s.target}.{z_layer}" for j, s in enumerate(streams)}
            plain["mlp"] = f"mlp_out.{layer}"
            state = reader.read(averaged, plain, resume_at=layer)
            delta = {}
            for j, s in enumerate(streams):
                K, now = state[f"K{j}"], state[f"current{j}"]
                start_values.setdefault(j, now)
                R = (s.targets - now) / divisor(len(layers) - i)
                if s.target == "resid_post":  # a residual target: map it to this layer's MLP output (post-norm)
                    R = residual_to_mlp_output(lm, layer, state["mlp"], R)
                dW64 = s.rule(layer, K, R)
                W = effective_weight(lm, s.part, layer)
                dW = dW64.to(torch.promote_types(W.dtype, torch.float32))  # a half-precision model: float32
                delta.update(a.weight_delta(s.part, layer, dW))
                out.layers.append(LayerReport(layer, s.part, float(R.norm(dim=0).mean()), float(dW.norm()),
                                              float(W.norm()), float(dW.norm() / W.norm())))
                if solves:
                    out.solves.append(LeastSquaresSolve(layer=layer, part=s.part, delta=dW64, K=K, R=R,
                                                        C=None if s.stats is None else s.stats[layer]))
            stack.enter_context(applied(lm, delta))  # the next layers see this update
            out.delta.update(delta)
        first = streams[0]
        reached = reader.read({}, {"z": f"{first.target}.{z_layer}"})["z"]
    covered = 1 - (first.targets - reached).norm(dim=0) / (first.targets - start_values[0]).norm(dim=0).clamp_min(1e-12)
    out.reached = [float(x) for x in covered]
    return out


def optimize_residual_targets(lm, requests, hp, progress=None, reference: bool = False,
                              label: str = "MEMIT", joint=None) -> list[Targets]:
    """MEMIT's targets (Eq. 16), also AlphaEdit's: one residual z_i at the last critical layer per request, over
    the first half of the progress bar (`joint`: requests sharing one delta, joint.Joint)."""
    opts = optimize_targets_batch(lm, list(requests), hp.layers[-1], ("resid_post",), hp, reference=reference,
                                  progress=part(progress, 0, 0.5, f"{label} ") if progress else None, joint=joint)
    return anchor_targets(lm, requests, opts, "resid_post", hp.layers[-1], hp)  # NAS, when chosen


def residual_mapping(lm) -> str:
    """How a residual target reaches the MLP output on this model (module docstring)."""
    return "post-MLP norm inverted" if lm.adapter.family.post_mlp_norm else "identity"


def finish(name: str, lm, requests, hp, opts: list[Targets], done: Spread, start: float, t_targets: float,
           progress=None, **details) -> EditResult:
    """The EditResult of a spread edit, with the diagnostics every spreading method reports; `details` are the
    method's own JSON numbers."""
    reports = [RequestReport(r.case_id, opt.losses, reached, opt.details())
               for r, opt, reached in zip(requests, opts, done.reached)]
    if progress:
        progress(1.0, f"{name} done")
    elapsed = time.perf_counter() - start
    return EditResult(name, list(requests), done.delta, hp, reports, done.layers, norm_report(lm.model, done.delta),
                      elapsed, seconds_targets=t_targets, seconds_spread=elapsed - t_targets,
                      details={"layers": list(hp.layers), **details}, solves=list(done.solves))
