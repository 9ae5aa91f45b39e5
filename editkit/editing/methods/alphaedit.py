"""AlphaEdit (Fang et al., "AlphaEdit: Null-Space Constrained Knowledge Editing for Language Models", ICLR 2025).

Keys, targets and spreading are MEMIT's (keys.py, targets.py, spread.py: residual targets z_i at the last critical
layer, R = (Z - H_L) / (L - i) mapped through Gemma's post-MLP norm). Only the solve at each layer differs:

1. Null space (Sec. 3.2; upstream experiments/evaluate.py `get_project`; nullspace.py). C = E[k k^T] (stats.py)
   = U diag(e) U^T;
   U0 = the eigenvectors whose eigenvalue falls in the null space (`nullspace_rule`), P = U0 U0^T. Keys of ordinary
   text lie (almost) in the span of the other eigenvectors, so Delta P k0 ~ 0 for them: the edit cannot disturb
   what C preserves, and no lambda C term is needed.
2. The update (Eq. 14):   Delta = R K1^T P (K_p K_p^T P + K1 K1^T P + alpha I)^-1,
   with K1 this batch's keys and K_p the keys of the earlier edits of the same sequence (upstream's `cache_c`,
   here a SequenceState that the caller carries from batch to batch; editing/sequence.py). Upstream solves the
   transposed system, solve(P (K1 K1^T + cache_c) + L2 I, P K1 R^T), which is the same matrix; editkit solves
   the same equations in the null space's basis (a k x k Cholesky system, `alphaedit_update_in_basis`; tests check
   both against each other and the normal equations).

The threshold. Upstream's `nullspace_threshold` 2e-2 is an absolute eigenvalue: its meaning depends on the size of
the model's activations. On Gemma 3 270M (C from 20,000 WikiText tokens, layers 2-6) it puts 1,340-1,847 of 2,048
directions in the "null" space, holding 4-27% of trace C, and on editkit's tiny models 0-3 of 256. editkit's default
rule is "energy": the null space is the smallest eigen-directions whose eigenvalues sum to at most `threshold` x
trace C. Since trace(P C) = E||P k||^2, that is exactly "ordinary keys keep at most this fraction of their squared
norm where the update acts", a statement that means the same on every model. "absolute" (upstream) and "relative"
(threshold x the largest eigenvalue) are available for comparison (`python -m editkit spectrum`).

Switches: `projection: false` sets P = I (the "P off" ablation, to test the claim that sequential stability comes
from the projection; arXiv 2605.26670 argues otherwise); `mom2_update_weight` lambda > 0 adds MEMIT's preserved
term lambda C to the matrix (with P = I and alpha = 0 the update is exactly MEMIT's Eq. 14, plus the earlier keys).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ...core.errors import EditkitError
from ..hparams import Hparams, _non_negative, _positive
from ..nullspace import NULL_RULES, null_space_basis
from ..result import EditResult
from ..sequence import SequenceState
from ..share import update_share
from ..spread import LeastSquaresSolve, Stream, finish, optimize_residual_targets, residual_mapping, spread
from ..stats import second_moment
from . import FirstUse, Method, register


@dataclass(frozen=True)
class AlphaEditHparams(Hparams):
    nullspace_rule: str = "energy"  # how nullspace_threshold is read: "energy", "relative" or "absolute" (upstream)
    nullspace_threshold: float = 0.01  # energy: max share of trace C in the null space; relative: x largest
    projection: bool = True  # False: P = I (the "P off" ablation)
    l2: float = 10.0  # alpha of Eq. 14 (upstream "L2"): the weight of ||Delta||^2
    mom2_update_weight: float = 0.0  # lambda: 0 = AlphaEdit; > 0 adds MEMIT's lambda C to the matrix

    CHECKS = {**Hparams.CHECKS, "nullspace_threshold": _positive, "l2": _non_negative,
              "mom2_update_weight": _non_negative}
    # the null space acts only in the solve: AlphaEdit's targets are MEMIT's, and the two share them (memo.py)
    SOLVE_ONLY = Hparams.SOLVE_ONLY | {"nullspace_rule", "nullspace_threshold", "projection", "l2",
                                       "mom2_update_weight"}

    def __post_init__(self):
        super().__post_init__()
        if self.nullspace_rule not in NULL_RULES:
            raise EditkitError(f"nullspace_rule must be one of {', '.join(NULL_RULES)}, not {self.nullspace_rule!r}")
        if self.nullspace_rule != "absolute" and self.nullspace_threshold >= 1:
            raise EditkitError(f"a {self.nullspace_rule} nullspace_threshold is a fraction below 1, "
                               f"not {self.nullspace_threshold}")
        if self.l2 == 0 and (self.projection or self.mom2_update_weight == 0):
            raise EditkitError("l2 = 0 leaves the system singular unless projection is false and "
                               "mom2_update_weight > 0 (MEMIT's update)")


def alphaedit_update(K: torch.Tensor, R: torch.Tensor, P: torch.Tensor | None, alpha: float,
                     prior: torch.Tensor | None = None, preserved: torch.Tensor | None = None) -> torch.Tensor:
    """AlphaEdit Eq. 14: Delta = R K^T P (A P + alpha I)^-1 with A = K_p K_p^T (`prior`) + K K^T (+ `preserved`,
    e.g. lambda C), in float64 (d_out, d_in). P None means P = I. Solved as upstream, transposed:
    (P A + alpha I) Delta^T = P K R^T (P and A symmetric). The result satisfies Delta (A P + alpha I) = R K^T P
    and, when P is a projector and alpha > 0, Delta = Delta P: its rows lie in the null space."""
    K64, R64 = K.double(), R.double()
    A = K64 @ K64.T
    if prior is not None:
        A = A + prior.double()
    if preserved is not None:
        A = A + preserved.double()
    eye = torch.eye(A.shape[0], dtype=torch.float64, device=A.device)
    rhs = K64 @ R64.T
    if P is not None:
        P64 = P.double()
        A, rhs = P64 @ A, P64 @ rhs
    return torch.linalg.solve(A + alpha * eye, rhs).T


def alphaedit_update_in_basis(K: torch.Tensor, R: torch.Tensor, U0: torch.Tensor | None, alpha: float,
                              prior_keys: torch.Tensor | None = None,
                              preserved: torch.Tensor | None = None) -> torch.Tensor:
    """The same Delta as alphaedit_update with P = U0 U0^T (U0 None: P = I), computed in the null space's basis.
    Delta = Delta P, so Delta^T = U0 Y; putting that into (P A + alpha I) Delta^T = P K R^T and multiplying by U0^T
    leaves the k x k symmetric positive definite system
        (U0^T A U0 + alpha I) Y = U0^T K R^T,   U0^T A U0 = B B^T (+ U0^T preserved U0),  B = U0^T [K_p, K],
    solved by Cholesky: O(k^2 m + k^3) instead of O(d^3) with d x d products, for k null directions and m keys.
    With fewer keys than directions and nothing preserved, the push-through identity
    (B B^T + alpha I)^-1 B = B (B^T B + alpha I)^-1 leaves an m x m system instead: Y = B Z with
    (B^T B + alpha I) Z = [0; R^T] (zero rows for the earlier keys) and Delta^T = (U0 B) Z, O(d k m + m^3).
    `prior_keys` are the earlier edits' keys K_p (d_in, m_p) themselves, not their Gram matrix."""
    K64, R64 = K.double(), R.double()
    keys = K64 if prior_keys is None else torch.cat([prior_keys.double().to(K64.device), K64], 1)
    cols = keys if U0 is None else U0.double().T @ keys  # B (P = I: the keys themselves)
    if preserved is None and cols.shape[1] < cols.shape[0]:
        S = cols.T @ cols + alpha * torch.eye(cols.shape[1], dtype=torch.float64, device=cols.device)
        e_rt = torch.zeros(cols.shape[1], R64.shape[0], dtype=torch.float64, device=cols.device)
        e_rt[-K64.shape[1]:] = R64.T
        L, info = torch.linalg.cholesky_ex(S)
        Z = torch.cholesky_solve(e_rt, L) if int(info) == 0 else torch.linalg.solve(S, e_rt)
        back = cols if U0 is None else U0.double() @ cols  # U0 B (d_in, m) first: no (d_in, k) x (k, d_out) product
        return (back @ Z).T
    if U0 is None:  # P = I: (A + alpha I) Delta^T = K R^T
        G = keys @ keys.T
        rhs = K64 @ R64.T
        if preserved is not None:
            G = G + preserved.double()
        basis = None
    else:
        basis = U0.double()
        B = basis.T @ keys
        G = B @ B.T
        if preserved is not None:
            G = G + basis.T @ preserved.double() @ basis
        rhs = B[:, -K64.shape[1]:] @ R64.T
    G = G + alpha * torch.eye(G.shape[0], dtype=torch.float64, device=G.device)
    L, info = torch.linalg.cholesky_ex(G)
    Y = torch.cholesky_solve(rhs, L) if int(info) == 0 else torch.linalg.solve(G, rhs)
    return (Y if basis is None else basis @ Y).T


def _bases(lm, hp: AlphaEditHparams) -> tuple[dict, dict]:
    """layer -> U0 (None when projection is off) and layer -> its null-space summary."""
    if not hp.projection:
        return {l: None for l in hp.layers}, {l: {"layer": l, "dimension": None, "projection": "off (P = I)"}
                                               for l in hp.layers}
    U0, info = {}, {}
    for l in hp.layers:
        U0[l], info[l] = null_space_basis(lm, l, hp.nullspace_rule, hp.nullspace_threshold, hp.mom2_n_tokens)
    return U0, info


@dataclass(kw_only=True)
class NullSpaceSolve(LeastSquaresSolve):
    """One layer's AlphaEdit update (Eq. 14) with the terms of its equation."""

    basis: torch.Tensor | None  # U0 (d_in, k), P = U0 U0^T; None: P = I (projection off)
    prior_keys: torch.Tensor | None  # K_p, the earlier edits' keys of the sequence (d_in, m), or None
    preserved: torch.Tensor | None  # lambda C when mom2_update_weight > 0, else None
    alpha: float  # the l2 weight

    @property
    def P(self) -> torch.Tensor | None:
        return None if self.basis is None else self.basis @ self.basis.T

    @property
    def prior(self) -> torch.Tensor | None:
        """K_p K_p^T (float64), as SequenceState.gram."""
        return None if self.prior_keys is None else self.prior_keys.double() @ self.prior_keys.double().T


def first_use(hp: AlphaEditHparams) -> FirstUse:
    """The plain statistics of the down-projection's keys (the null space is computed from them when used)."""
    return FirstUse({"down_proj": ("all",)}, templates=True)


def apply_alphaedit(lm, requests, hp: AlphaEditHparams, progress=None, reference: bool = False,
                    solves: bool = False, state: SequenceState | None = None) -> EditResult:
    start = time.perf_counter()
    state = state if state is not None else SequenceState("alphaedit")
    state.check("alphaedit")
    opts = optimize_residual_targets(lm, requests, hp, progress, reference, label="AlphaEdit")
    t_targets = time.perf_counter() - start
    C = second_moment(lm, hp.layers, hp.mom2_n_tokens)
    U0, null_info = _bases(lm, hp)
    used: dict[int, torch.Tensor] = {}

    def rule(layer, K, R):
        used[layer] = K  # = the key after the whole edit: only layers below `layer` change it, and they are applied
        preserved = hp.mom2_update_weight * C[layer] if hp.mom2_update_weight > 0 else None
        return alphaedit_update_in_basis(K, R, U0[layer], hp.l2, state.keys(layer), preserved)

    targets = torch.stack([opt.at("resid_post").target for opt in opts], 1)
    stream = Stream("down_proj", "mlp_key", "resid_post", targets, rule, C)
    done = spread(lm, requests, hp, [stream], divisor=float, label="AlphaEdit", progress=progress, solves=solves)
    done.solves = [NullSpaceSolve(layer=s.layer, part=s.part, delta=s.delta, K=s.K, R=s.R, C=s.C,
                                  basis=U0[s.layer], prior_keys=state.keys(s.layer), alpha=hp.l2,
                                  preserved=hp.mom2_update_weight * C[s.layer] if hp.mom2_update_weight > 0 else None)
                   for s in done.solves]
    result = finish("alphaedit", lm, requests, hp, opts, done, start, t_targets, progress,
                    residual_mapping=residual_mapping(lm), null_space=[null_info[l] for l in hp.layers],
                    sequence_edits_before=state.edits)
    result.state = state.with_keys(used, len(requests))
    return result


METHOD = register(Method(
    name="alphaedit", label="AlphaEdit", apply=apply_alphaedit, hparams=AlphaEditHparams, order=40,
    color="#e7298a", stateful=True, first_use=first_use, predict_share=update_share,
    targets=lambda hp: (("resid_post",), hp.layers[-1], False),
    spreading="MEMIT's residual spreading, each layer's update projected onto the null space of C (Eq. 14)",
    about="AlphaEdit (Fang et al. 2025): MEMIT's keys and targets, the update confined to directions ordinary text "
          "does not use, and the earlier edits of a sequence kept."))
