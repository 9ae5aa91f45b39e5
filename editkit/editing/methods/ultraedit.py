"""UltraEdit (Gu et al. 2025, arXiv 2505.14679; code XiaojieGu/UltraEdit): lifelong editing with no covariance
statistics, no subject and no memory module. Each round is one closed-form ridge solve per edited FFN output
projection from the keys and the cross-entropy's gradients at the target tokens, normalised with running
statistics carried from round to round (the math: editing/ultra.py).

The running statistics are this method's sequence state (editing/sequence.py): a SequenceState whose tensors are
"stats.<group>.n / .mean / .m2" per statistics group, so a lifelong run (evaluation/sequential.py) carries them
from batch to batch and a checkpoint resumes them. A single edit starts from empty statistics: its own rows are
all it normalises with. Groups: upstream keeps one normaliser per module *shape* (all edited down-projections of
a model share one); `normalizer: "module"` keeps one per edited layer instead.

The result (editing/result.py): per edited down-projection a ParameterNorm and a LayerReport (its "residual_norm"
is the mean ||v|| of the pseudo-values the layer was asked to write), per request a RequestReport with no
optimisation steps (the NLL and P(target) at which the gradients were taken are in its details), and with
`solves=True` a RidgeSolve per layer: K, G, k_hat, g_hat, V, the statistics and Delta, so the normal equations and
the predicted output change K Delta can be checked. First use: nothing (no covariance, no templates).

Upstream's hyperparameters (config/editor/ultraedit.yaml): lr 1e-6, `token: ans`, 100 edits per round in forward
batches of 10 (config/dataset/*.yaml); the edited modules per model in config/model/*.yaml (e.g. GPT-J's fc_out of
layers 18-26 of 28, Mistral-7B's down_proj of layers 29-30 of 32). editkit edits the down-projections (the maps
its adapters edit); the choice of layers and lr per model is in assets/hparams/README.md.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...core.errors import EditkitError
from ..hparams import BaseHparams, _positive
from ..result import EditResult, LayerReport, RequestReport, Solve, norm_report
from ..sequence import SequenceState
from ..ultra import RunningStats, keys_and_gradients, ultraedit_update
from . import Method, nothing, register

NORMALIZERS = ("shape", "module")


@dataclass(frozen=True)
class UltraEditHparams(BaseHparams):
    """UltraEdit's hyperparameters. A `BaseHparams`, not an `Hparams`: it optimizes no target vectors, so it has
    none of their fields (nor any solve-only field for editing/memo.py to reuse targets across)."""

    layers: tuple[int, ...]  # edited down-projections (upstream: the FFN output projections of the last layers)
    lr: float = 1e-6  # step of the pseudo-values v = -lr ||k_hat||^2 g_hat (upstream editor.lr)
    ridge: float = 1.0  # the regulariser of the solve (K^T K + ridge I)^-1 K^T V (upstream: the identity, 1)
    forward_batch: int = 10  # requests per forward/backward; the cross-entropy is the mean over one batch's
    # target tokens (upstream dataset.batch_size)
    normalizer: str = "shape"  # running statistics per module "shape" (upstream) or per edited "module"
    source: str = ""  # where these values come from (provenance, shown to users)

    CHECKS: ClassVar[dict] = {"lr": _positive, "ridge": _positive, "forward_batch": _positive}

    def check(self) -> None:
        if self.normalizer not in NORMALIZERS:
            raise EditkitError(f"normalizer must be one of {', '.join(NORMALIZERS)}, not {self.normalizer!r}")


# --- the sequence state: running statistics per group ------------------------------------------------------------
def group_of(lm, layer: int, normalizer: str) -> str:
    """The statistics group of the down-projection at `layer`: its shape (d_in x d_out) or its layer."""
    if normalizer == "module":
        return f"down_proj.{layer}"
    d_out, d_in = lm.adapter.weight("down_proj", layer).shape
    return f"down_proj.{d_in}x{d_out}"


def stats_from_state(state: SequenceState, group: str, width: int) -> RunningStats:
    if f"stats.{group}.mean" not in state.tensors:
        return RunningStats.empty(width)
    t = state.tensors
    stats = RunningStats(int(t[f"stats.{group}.n"].item()), t[f"stats.{group}.mean"].double(),
                         t[f"stats.{group}.m2"].double())
    if stats.mean.shape[0] != width:
        raise EditkitError(f"this sequence state's statistics {group} have width {stats.mean.shape[0]}, not "
                           f"{width}: it belongs to another model")
    return stats


def state_with(state: SequenceState, stats: dict, n_requests: int, normalizer: str) -> SequenceState:
    """The next state: `stats` (group -> RunningStats) in place of the earlier ones."""
    tensors = dict(state.tensors)
    for group, s in stats.items():
        tensors[f"stats.{group}.n"] = torch.tensor([float(s.n)], dtype=torch.float64)
        tensors[f"stats.{group}.mean"] = s.mean.clone()
        tensors[f"stats.{group}.m2"] = s.m2.clone()
    meta = {**state.meta, "edits": state.edits + n_requests, "batches": int(state.meta.get("batches", 0)) + 1,
            "normalizer": normalizer}
    return SequenceState(state.method, tensors, meta)


# --- the method --------------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class RidgeSolve(Solve):
    """One layer's UltraEdit update with the inputs of its equation, float64 and row-wise (n rows = the round's
    target tokens): (K^T K + ridge I) Delta = K^T V, and `delta` (the Solve's, math layout) is Delta^T."""

    keys: torch.Tensor  # K (n, d_in): the raw keys, the down-projection's inputs at the target tokens
    gradients: torch.Tensor  # G (n, d_out): dL/dy of the mean cross-entropy at the same positions
    k_hat: torch.Tensor  # the keys normalised with the running statistics (n, d_in)
    g_hat: torch.Tensor  # the gradients normalised with them (n, d_out)
    values: torch.Tensor  # V = -lr ||k_hat||^2 g_hat (n, d_out), what the solve asks the map to write
    stats: RunningStats  # the running statistics of [k, g] after this round, as used
    group: str  # their statistics group
    ridge: float
    lr: float

    @property
    def predicted(self) -> torch.Tensor:
        """K Delta (n, d_out): the change of the map's output at the round's keys once the update is added."""
        return self.keys @ self.delta.T


def _keys_and_gradients(lm, requests, hp: UltraEditHparams, progress=None) -> tuple[dict, dict, list]:
    """K (n, d_ff) and G (n, d_model) per layer over every target token of the round, in forward batches of
    `forward_batch` requests, and per request a RequestReport with the NLL at which the gradients were taken
    (no optimisation steps: UltraEdit has no target optimisation)."""
    keys = {l: [] for l in hp.layers}
    grads = {l: [] for l in hp.layers}
    reports = []
    size = hp.forward_batch
    for c in range(0, len(requests), size):
        chunk = requests[c:c + size]
        if progress:
            progress(0.8 * c / len(requests), f"UltraEdit: gradients of requests {c + 1}-{c + len(chunk)} of "
                                              f"{len(requests)}")
        got = keys_and_gradients(lm, [r.rewrite for r in chunk], [r.target_new for r in chunk], hp.layers)
        for l in hp.layers:
            keys[l].append(got["keys"][l])
            grads[l].append(got["grads"][l])
        for j, r in enumerate(chunk):
            nll = got["nll"][got["row"] == j]
            reports.append(RequestReport(r.case_id, details={
                "tokens": len(nll), "nll_before": float(nll.mean()), "p_target_before": float(torch.exp(-nll.sum()))}))
    return ({l: torch.cat(keys[l]) for l in hp.layers}, {l: torch.cat(grads[l]) for l in hp.layers}, reports)


def _statistics(lm, state: SequenceState, K: dict, G: dict, normalizer: str) -> tuple[dict, dict]:
    """layer -> group and group -> the running statistics updated with this round's rows of all its layers (the
    rows update the statistics before they are used: upstream's `cache` precedes `predict_param_shifts`)."""
    groups = {l: group_of(lm, l, normalizer) for l in K}
    stats = {}
    for l in K:
        g = groups[l]
        if g not in stats:
            stats[g] = stats_from_state(state, g, K[l].shape[1] + G[l].shape[1])
        stats[g] = stats[g].merged(torch.cat([K[l], G[l]], 1))
    thin = sorted(g for g, s in stats.items() if s.n < 2)
    if thin:
        raise EditkitError(f"UltraEdit's normalisation needs at least two rows per statistics group; "
                           f"{', '.join(thin)} has one (a single one-token target): edit more requests at once, "
                           "edit several layers with normalizer \"shape\", or continue a sequence")
    return groups, stats


def _solve_summary(layer: int, K: torch.Tensor, up: dict) -> dict:
    """How well the ridge solve writes its values (||K Delta - V|| / ||V||) and the sizes that set them."""
    K = K.double().to(up["delta"].device)  # the keys stay where the model runs; the solve is on the CPU
    fit = (K @ up["delta"].T - up["values"]).norm() / up["values"].norm().clamp_min(1e-300)
    return {"layer": layer, "rows": K.shape[0], "key_norm": float(K.norm(dim=1).mean()),
            "key_hat_norm": float(up["k_hat"].norm(dim=1).mean()), "fit_residual": float(fit)}


def apply_ultraedit(lm, requests, hp: UltraEditHparams, progress=None, reference: bool = False,
                    solves: bool = False, state: SequenceState | None = None) -> EditResult:
    """One UltraEdit round on `requests` at the weights this context sees. `reference` has no effect (there is no
    target optimisation); `state` carries the running statistics of the earlier rounds of a sequence; `solves`
    keeps each layer's RidgeSolve."""
    start = time.perf_counter()
    state = state if state is not None else SequenceState("ultraedit")
    state.check("ultraedit")
    if state.meta.get("normalizer", hp.normalizer) != hp.normalizer:
        raise EditkitError(f"this sequence's statistics are per {state.meta['normalizer']}; keep normalizer "
                           f"{state.meta['normalizer']!r} for the whole sequence")
    a, requests = lm.adapter, list(requests)
    K, G, reports = _keys_and_gradients(lm, requests, hp, progress)
    t_gradients = time.perf_counter() - start
    groups, stats = _statistics(lm, state, K, G, hp.normalizer)
    delta, layers, kept, summaries = {}, [], [], []
    for i, l in enumerate(hp.layers):
        if progress:
            progress(0.8 + 0.2 * i / len(hp.layers), f"UltraEdit: solving layer {l}")
        up = ultraedit_update(K[l], G[l], stats[groups[l]], hp.lr, hp.ridge)
        W = a.weight("down_proj", l)
        delta.update(a.weight_delta("down_proj", l, up["delta"].to(W.device)))
        dn, wn = float(up["delta"].norm()), float(W.norm())
        layers.append(LayerReport(l, "down_proj", float(up["values"].norm(dim=1).mean()), dn, wn,
                                  dn / wn if wn else float("inf")))
        summaries.append(_solve_summary(l, K[l], up))
        if solves:
            kept.append(RidgeSolve(layer=l, part="down_proj", delta=up["delta"], keys=K[l].double().cpu(),
                                   gradients=G[l].double().cpu(), k_hat=up["k_hat"], g_hat=up["g_hat"],
                                   values=up["values"], stats=stats[groups[l]], group=groups[l], ridge=hp.ridge,
                                   lr=hp.lr))
    details = {"layers": list(hp.layers), "normalizer": hp.normalizer, "solve": summaries,
               "statistics_rows": {g: s.n for g, s in stats.items()}, "sequence_edits_before": state.edits,
               "seconds_gradients": round(t_gradients, 2)}
    if progress:
        progress(1.0, "UltraEdit done")
    return EditResult("ultraedit", requests, delta, hp, per_request=reports, layers=layers,
                      norms=norm_report(lm.model, delta), seconds=time.perf_counter() - start, details=details,
                      solves=kept, state=state_with(state, stats, len(requests), hp.normalizer))


def explain(result, i: int) -> str:
    """Why an UltraEdit edit may not win its rewrite: its learning rate, chosen to keep the neighbours."""
    hp = result.hparams
    lr = hp.get("lr") if isinstance(hp, dict) else getattr(hp, "lr", None)
    if lr is None:
        return ""
    return (f"UltraEdit's step is lr x ||k_hat||^2 g_hat, and its lr ({lr:g}) was chosen on validation "
            "to keep the neighbours, where few single rewrites win; a larger lr buys efficacy with "
            "neighbours (its operating points on Edit & compare, docs/results/ultraedit.md)")


METHOD = register(Method(
    name="ultraedit", label="UltraEdit", apply=apply_ultraedit, hparams=UltraEditHparams, order=50,
    color="#66a61e", stateful=True, first_use=nothing, placement="depth", explain=explain,
    spreading="each edited layer's own ridge solve from its keys and gradients, no statistics of text",
    about="UltraEdit (Gu et al. 2025): lifelong editing by a closed-form ridge solve per round from the target "
          "tokens' keys and gradients, normalised with running statistics kept across rounds."))
