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

from ...core.progress import part
from ...model.weights import applied, effective_weight
from ..anchor import anchor_targets
from ..hparams import Hparams
from ..keys import key_star, keys_at
from ..result import EditResult, RequestReport, Solve, norm_report
from ..share import SharePrediction, edited_maps, update_share
from ..stats import cholesky, key_statistics, positions_for
from ..targets import optimize_targets
from . import FirstUse, Method, register


@dataclass(frozen=True)
class RomeHparams(Hparams):
    mom2_adjustment: bool = True  # C from the statistics (False: C = I, EasyEdit's Llama setting)
    rrome: bool = True  # r-ROME's denominator (k* everywhere); False reproduces kmeng01/rome's k_p

    SOLVE_ONLY = Hparams.SOLVE_ONLY | {"mom2_adjustment", "rrome"}


@dataclass(kw_only=True)
class RankOneSolve(Solve):
    """One request's update of Eq. 2, delta = Lambda u^T, with its factors (float64)."""

    k_star: torch.Tensor  # k*, the template-averaged key (d_ff,)
    v_star: torch.Tensor  # v*, the optimized MLP output (d_model,)
    k_den: torch.Tensor  # the key in the residual and the denominator: k* (r-ROME) or the plain prompt's k_p
    u: torch.Tensor  # C^-1 k*
    lam: torch.Tensor  # Lambda = (v* - W k_den - b) / (u^T k_den)


def rome_update(W: torch.Tensor, b: torch.Tensor | None, C: torch.Tensor, k_star: torch.Tensor,
                v_star: torch.Tensor, k_den: torch.Tensor | None = None,
                L: torch.Tensor | None = None) -> tuple[torch.Tensor, dict]:
    """Delta W (d_model, d_ff) of ROME's Eq. 2, and its factors u = C^-1 k* and Lambda (float64) with the
    division factor; `k_den` (default k*) is the key used in the residual/denominator; `L`: C's Cholesky factor
    (stats.cholesky), when cached (two triangular solves instead of factorizing C on every edit)."""
    k_den = k_star if k_den is None else k_den
    W64 = W.double()
    if L is not None:
        u = torch.cholesky_solve(k_star.double()[:, None], L.double())[:, 0]  # C^-1 k*
    else:
        u = torch.linalg.solve(C.double(), k_star.double())  # C^-1 k*, no explicit inverse
    current_out = W64 @ k_den.double() + (b.double() if b is not None else 0)
    denominator = u @ k_den.double()
    delta = torch.outer(v_star.double() - current_out, u) / denominator
    info = {"division_factor": float(denominator / u.norm()), "denominator": float(denominator),
            "u": u, "lam": (v_star.double() - current_out) / denominator}
    return delta.to(torch.promote_types(W.dtype, torch.float32)), info  # float32 for a half-precision W


def first_use(hp: RomeHparams) -> FirstUse:
    """The key statistics of the edited layer (none with C = I) and the context templates."""
    return FirstUse({"down_proj": positions_for(hp)} if hp.mom2_adjustment else {}, templates=True)


def apply_rome(lm, requests, hp: RomeHparams, progress=None, reference: bool = False,
               solves: bool = False) -> EditResult:
    start = time.perf_counter()
    a = lm.adapter
    layer = hp.layers[0]
    L = None
    if hp.mom2_adjustment:
        C = key_statistics(lm, [layer], hp, progress=part(progress, 0, 0.3) if progress else None)[layer]
        L = cholesky(lm, layer, hp, C=C)
    else:
        C = torch.eye(a.d_ff, device=lm.device)
    name = a.param_name("down_proj", layer)
    total, reports, records, t_targets = None, [], [], 0.0
    with ExitStack() as stack:
        for i, request in enumerate(requests):
            if progress:
                progress(0.3 + 0.7 * i / len(requests), f"ROME: request {i + 1}/{len(requests)}")
            k_star = key_star(lm, layer, request, hp)
            t0 = time.perf_counter()
            opt = optimize_targets(lm, request, layer, ("mlp_out",), hp, reference=reference)
            opt = anchor_targets(lm, [request], [opt], "mlp_out", layer, hp)[0]  # NAS, when chosen
            t_targets += time.perf_counter() - t0
            v_star = opt.at("mlp_out").target
            k_den = k_star if hp.rrome else keys_at(lm, layer, [(request.rewrite, 0)], request.subject)[0]
            W = effective_weight(lm, "down_proj", layer)
            b = a.down_bias(layer)
            dW, info = rome_update(W, None if b is None else b.detach(), C, k_star, v_star, k_den, L)
            u, lam = info.pop("u"), info.pop("lam")
            delta = a.weight_delta("down_proj", layer, dW)
            if solves:
                records.append(RankOneSolve(layer=layer, part="down_proj", delta=dW.double(), C=C, k_star=k_star,
                                            v_star=v_star, k_den=k_den, u=u, lam=lam))
            stack.enter_context(applied(lm, delta))  # later requests see this one, as upstream
            total = delta if total is None else {name: total[name] + delta[name]}
            reports.append(RequestReport(request.case_id, opt.losses, details={
                "layer": layer, **info, "v_star_norm": float(v_star.norm()), "k_star_norm": float(k_star.norm()),
                "delta_norm": float(dW.norm()), "weight_norm": float(W.norm()),
                "relative_norm": float(dW.norm() / W.norm()), **opt.details()}))
    if progress:
        progress(1.0, "ROME done")
    return EditResult("rome", list(requests), total, hp, reports, norms=norm_report(lm.model, total),
                      seconds=time.perf_counter() - start, seconds_targets=t_targets,
                      details={"layer": layer, "rrome": hp.rrome}, solves=records)


class RankOneShare(SharePrediction):
    """ROME Eq. 2 from the edit's own factors: Delta W k = Lambda (C^-1 k*)^T k = s(k) (v* - W k*) with
    s(k) = (C^-1 k*)^T k / (C^-1 k*)^T k*, exact at every token of every prompt."""

    formula = "Lambda (C^-1 k*)^T k (ROME Eq. 2)"
    axis = "predicted share s = (C⁻¹k*)ᵀk / (C⁻¹k*)ᵀk*"

    def __init__(self, maps, solve: RankOneSolve):
        super().__init__(maps, checked=len(maps))
        self.solve = solve

    def share(self, keys: list[torch.Tensor]) -> torch.Tensor:
        s = self.solve
        return (keys[0] @ s.u.float()) / float(s.u @ s.k_star.double())

    def change(self, i: int, keys: torch.Tensor) -> torch.Tensor:
        return (keys @ self.solve.u.float())[..., None] * self.solve.lam.float()


def predict_share(lm, result: EditResult) -> SharePrediction:
    """The bleed map's prediction for a one-request ROME edit (run with solves=True); a batch of requests, each
    on top of the others, has no single k*: then the update's own projection (share.UpdateShare)."""
    maps = edited_maps(lm, result.delta)
    if len(result.solves) != 1 or len(maps) != 1:
        return update_share(lm, result)
    return RankOneShare(maps, result.solves[0])


METHOD = register(Method(
    name="rome", label="ROME", apply=apply_rome, hparams=RomeHparams, order=10, batch=False, color="#1b9e77",
    first_use=first_use, predict_share=predict_share, placement="peak",
    targets=lambda hp: (("mlp_out",), hp.layers[0], False),
    spreading="one layer, a rank-one update per request (Eq. 2)",
    about="Rank-One Model Editing (Meng et al. 2022): W k* = v* at one MLP layer, requests one after another."))
