"""UltraEdit (Gu et al. 2025, arXiv 2505.14679; code XiaojieGu/UltraEdit): lifelong editing with no covariance
statistics, no subject and no memory module. Each round is one closed-form ridge solve per edited FFN output
projection from the keys and the cross-entropy's gradients at the target tokens, normalised with running
statistics carried from round to round (the math: editing/ultra.py).

The running statistics are this method's sequence state (editing/sequence.py): a SequenceState whose tensors are
"stats.<group>.n / .mean / .m2" per statistics group, so a lifelong run (evaluation/sequential.py) carries them
from batch to batch and a checkpoint resumes them. A single edit starts from empty statistics: its own rows are
all it normalises with. Groups: upstream keeps one normaliser per module *shape* (all edited down-projections of
a model share one); `normalizer: "module"` keeps one per edited layer instead.

Upstream's hyperparameters (config/editor/ultraedit.yaml): lr 1e-6, `token: ans`, 100 edits per round in forward
batches of 10 (config/dataset/*.yaml); the edited modules per model in config/model/*.yaml (e.g. GPT-J's fc_out of
layers 18-26 of 28, Mistral-7B's down_proj of layers 29-30 of 32). editkit edits the down-projections (the maps
its adapters edit); the choice of layers and lr per model is in assets/hparams/README.md.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, fields
from typing import ClassVar

import torch

from ...errors import EditkitError
from ..hparams import _non_negative, _positive, from_dict
from ..result import EditResult, norm_report
from ..sequence import SequenceState
from ..ultra import RunningStats, keys_and_gradients, ultraedit_update
from . import Method, register

NORMALIZERS = ("shape", "module")


@dataclass(frozen=True)
class UltraEditHparams:
    """UltraEdit's hyperparameters. Not an `Hparams`: it optimizes no target vectors, so it has none of their
    fields; it offers the same interface (validated on construction, to_dict, replace)."""

    layers: tuple[int, ...]  # edited down-projections (upstream: the FFN output projections of the last layers)
    lr: float = 1e-6  # step of the pseudo-values v = -lr ||k_hat||^2 g_hat (upstream editor.lr)
    ridge: float = 1.0  # the regulariser of the solve (K^T K + ridge I)^-1 K^T V (upstream: the identity, 1)
    forward_batch: int = 10  # requests per forward/backward; the cross-entropy is the mean over one batch's
    # target tokens (upstream dataset.batch_size)
    normalizer: str = "shape"  # running statistics per module "shape" (upstream) or per edited "module"
    source: str = ""  # where these values come from (provenance, shown to users)

    CHECKS: ClassVar[dict] = {"lr": _positive, "ridge": _positive, "forward_batch": _positive}
    SOLVE_ONLY: ClassVar[frozenset] = frozenset()  # no target optimisation to reuse (editing/memo.py)
    # What today's first-use preparation (editing/api.first_use) reads: UltraEdit needs no second-moment
    # statistics and no context templates before its first edit.
    mom2_adjustment: ClassVar[bool] = False
    context_templates: ClassVar[int] = 0
    context_length: ClassVar[int] = 0

    def __post_init__(self):
        _validate(self)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["layers"] = list(self.layers)
        return d

    def replace(self, **changes) -> "UltraEditHparams":
        return from_dict(type(self), {**self.to_dict(), **changes})


def _validate(hp: UltraEditHparams) -> None:
    layers = hp.layers
    if not isinstance(layers, tuple) or not layers or not all(
            isinstance(l, int) and not isinstance(l, bool) for l in layers):
        raise EditkitError(f"hyperparameter 'layers' must be a non-empty list of integers, not {layers!r}")
    if list(layers) != sorted(set(layers)):
        raise EditkitError("layers must be increasing and distinct")
    for f in fields(hp):
        v = getattr(hp, f.name)
        if f.type in ("int", "float"):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise EditkitError(f"hyperparameter '{f.name}' must be a finite number, not {v!r}")
            if f.type == "int" and not isinstance(v, int):
                raise EditkitError(f"hyperparameter '{f.name}' must be a whole number, not {v!r}")
            if f.name in hp.CHECKS and not hp.CHECKS[f.name](v):
                raise EditkitError(f"hyperparameter '{f.name}' out of range: {v}")
        elif f.type == "str" and not isinstance(v, str):
            raise EditkitError(f"hyperparameter '{f.name}' must be a string, not {v!r}")
    if hp.normalizer not in NORMALIZERS:
        raise EditkitError(f"normalizer must be one of {', '.join(NORMALIZERS)}, not {hp.normalizer!r}")


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
def _keys_and_gradients(lm, requests, hp: UltraEditHparams, progress=None) -> tuple[dict, dict, list]:
    """K (n, d_ff) and G (n, d_model) per layer over every target token of the round, in forward batches of
    `forward_batch` requests, and per request the NLL at which the gradients were taken."""
    keys = {l: [] for l in hp.layers}
    grads = {l: [] for l in hp.layers}
    details = []
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
            loss = float(nll.mean())
            details.append({"case_id": r.case_id, "tokens": len(nll), "losses": [
                {"step": 0, "loss": loss, "nll": loss, "p_target": float(torch.exp(-nll.sum()))}]})
    return ({l: torch.cat(keys[l]) for l in hp.layers}, {l: torch.cat(grads[l]) for l in hp.layers}, details)


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


def _diagnostics(layer: int, group: str, K: torch.Tensor, G: torch.Tensor, up: dict, W: torch.Tensor) -> dict:
    dW = up["delta"]
    fit = (K.double() @ dW.T - up["values"]).norm() / up["values"].norm().clamp_min(1e-300)
    return {"layer": layer, "rows": K.shape[0], "group": group, "key_norm": float(K.norm(dim=1).mean()),
            "key_hat_norm": float(up["k_hat"].norm(dim=1).mean()), "gradient_norm": float(G.norm(dim=1).mean()),
            "value_norm": float(up["values"].norm(dim=1).mean()), "fit_residual": float(fit),
            "delta_norm": float(dW.norm()), "weight_norm": float(W.norm()),
            "relative_norm": float(dW.norm() / W.norm())}


def apply_ultraedit(lm, requests, hp: UltraEditHparams, progress=None, debug: list | None = None,
                    reference: bool = False, state: SequenceState | None = None) -> EditResult:
    """One UltraEdit round on `requests` at the weights this context sees. `reference` has no effect (there is no
    target optimisation); `state` carries the running statistics of the earlier rounds of a sequence."""
    start = time.perf_counter()
    state = state if state is not None else SequenceState("ultraedit")
    state.check("ultraedit")
    if state.meta.get("normalizer", hp.normalizer) != hp.normalizer:
        raise EditkitError(f"this sequence's statistics are per {state.meta['normalizer']}; keep normalizer "
                           f"{state.meta['normalizer']!r} for the whole sequence")
    a, requests = lm.adapter, list(requests)
    K, G, details = _keys_and_gradients(lm, requests, hp, progress)
    t_gradients = time.perf_counter() - start
    groups, stats = _statistics(lm, state, K, G, hp.normalizer)
    delta, per_layer = {}, []
    for i, l in enumerate(hp.layers):
        if progress:
            progress(0.8 + 0.2 * i / len(hp.layers), f"UltraEdit: solving layer {l}")
        up = ultraedit_update(K[l], G[l], stats[groups[l]], hp.lr, hp.ridge)
        W = a.weight("down_proj", l)
        delta.update(a.weight_delta("down_proj", l, up["delta"].to(W.device)))
        per_layer.append(_diagnostics(l, groups[l], K[l], G[l], up, W))
        if debug is not None:
            debug.append({"layer": l, "K": K[l], "G": G[l], "stats": stats[groups[l]], **up})
    info = {"layers": list(hp.layers), "per_layer": per_layer, "requests": details, "normalizer": hp.normalizer,
            "statistics_rows": {g: s.n for g, s in stats.items()}, "sequence_edits_before": state.edits,
            "seconds_gradients": round(t_gradients, 2), "norms": norm_report(lm.model, delta),
            "hparams": hp.to_dict()}
    if progress:
        progress(1.0, "UltraEdit done")
    return EditResult("ultraedit", requests, delta, info, time.perf_counter() - start,
                      state=state_with(state, stats, len(requests), hp.normalizer))


METHOD = register(Method(
    name="ultraedit", label="UltraEdit", apply=apply_ultraedit, hparams=UltraEditHparams, order=50,
    color="#66a61e", stateful=True,
    spreading="each edited layer's own ridge solve from its keys and gradients, no statistics of text",
    about="UltraEdit (Gu et al. 2025): lifelong editing by a closed-form ridge solve per round from the target "
          "tokens' keys and gradients, normalised with running statistics kept across rounds."))
