"""Attribution patching: a first-order estimate of every heatmap cell at once, the preview of a trace.

Activation patching (the exact trace) restores a state a at token t, layer l, in each corrupted run and measures
p(answer). Attribution patching (Nanda 2023, "Attribution patching: activation patching at industrial scale";
AtP in Kramar et al. 2024, arXiv 2403.00745, Eq. 3) replaces that forward pass by the first-order Taylor term:

    IE(a) = p_i(a_clean) - p_i(a_i)  ~  (a_clean - a_i) . dp_i/da |_(a = a_i)

with the gradient taken in corrupted run i, averaged over the n corrupted samples. One corrupted forward and one
backward (for all samples together) give the gradient at every state of every layer, so all cells of all three
kinds cost one pass; the clean states come from the clean run the trace builds anyway (and TraceSetup.build(...,
gradients=True) keeps the corrupted forward, so the preview costs one backward). ROME's MLP/attention windows restore
several layers at once: their estimate is the sum of the layers' estimates. The estimated score of a cell is
P*[o] + IE. For comparison, `method="clean"` takes the gradient in the clean run instead (the first-order cost of
corrupting that one state) and `"mean"` averages the two (a two-point trapezoid); on the known facts the standard
corrupted-run gradient ranks cells best, so the page uses it.

Where it fails (Kramar et al. 2024, Sec. 3): the estimate is linear in the change, and restoring a clean state is
not a small change (3 sigma of noise on the subject's embeddings). (1) Saturation: the corrupted run puts
p(answer) near 0, where the softmax is flat: the gradient there is tiny although restoring the state recovers much
of p. On "The Space Needle is in downtown" the exact hidden panel reaches 0.38 at " Needle" (layers 1-11) where
the estimate stays at the corrupted 0.015; the last token's late layers are found (that path is nearly linear).
(2) Attention saturation (AtP*'s main case): an attention softmax that is saturated in the corrupted run has
near-zero gradient with respect to the keys it ignores, so a restoration that would move a later token's attention
back to the subject gets little credit; AtP* recomputes the attention softmax exactly for that reason (not done
here: the preview stays one backward). (3) Windows: the sum of per-layer estimates also counts the paths from
one restored module through the others, which the exact restoration overwrites; and paths whose first-order
effects cancel look unimportant.
So the preview ranks cells roughly (`bench trace` reports its Spearman rank correlation with the exact maps) and
is always labelled an estimate; it is exact to first order (tests: finite differences; small noise, where the
ranks agree).
"""
from __future__ import annotations

import numpy as np
import torch

from ..core.errors import EditkitError
from ..model.sites import TRACE_KINDS, site
from .setup import TraceSetup, corrupt_embeddings, window_layers

METHODS = ("corrupted", "clean", "mean")


def attribution(lm, setup: TraceSetup, kinds=tuple(TRACE_KINDS), window: int = 10,
                method: str = "corrupted") -> dict:
    """Estimated scores (tokens, layers) per kind (see module docstring). `method` picks where the gradient is
    taken: "corrupted" (AtP: in each corrupted run, one backward for all samples), "clean" (in the clean run: the
    linear estimate of what corrupting the state would cost, a 1-row backward), or "mean" (their average, the
    trapezoid rule between the two ends). Cells at tokens before the subject are the corrupted score exactly
    (clean = corrupted there)."""
    if method not in METHODS:
        raise EditkitError(f"method must be one of {', '.join(METHODS)}")
    kinds = list(kinds)
    names = [site(kind, l).name for kind in kinds for l in range(lm.adapter.n_layers)]
    per_layer = {}
    if method in ("corrupted", "mean"):
        states, grads = _gradients(lm, setup, names, corrupted=True)
        per_layer["corrupted"] = {n: _dot(setup.clean[n] - states[n], grads[n]) for n in names}
    if method in ("clean", "mean"):
        _, clean_grads = _gradients(lm, setup, names, corrupted=False)
        per_layer["clean"] = {n: _dot(setup.clean[n] - setup.corrupt[n], clean_grads[n]) for n in names}
    ie = {n: sum(v[n] for v in per_layer.values()) / len(per_layer) for n in names}
    return {kind: setup.low_score + _panel(setup, lm.adapter.n_layers, kind, window, ie) for kind in kinds}


def _dot(delta: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """(a_clean - a_i) . dp_i/da per token, averaged over the samples: (T,)."""
    return (delta * grad).sum(-1).mean(0).float()


def _panel(setup, L, kind, window, ie) -> torch.Tensor:
    per_layer = torch.stack([ie[site(kind, l).name] for l in range(L)], 1)  # (T, L)
    per_layer[:setup.subject_range[0]] = 0.0
    if kind == "hidden":
        return per_layer
    return torch.stack([per_layer[:, list(window_layers(l, window, L))].sum(1) for l in range(L)], 1)


def _gradients(lm, setup: TraceSetup, names: list[str], corrupted: bool) -> tuple[dict, dict]:
    """The states at `names` and the gradients of p(answer) (summed over rows) with respect to them, in the
    corrupted runs (n rows, the setup's noise) or the clean run (1 row)."""
    if corrupted and setup.corrupt_graph is not None:  # build(gradients=True) kept the forward: backward only
        p, states = setup.corrupt_graph
        setup.corrupt_graph = None  # one backward; the graph's memory is freed
        if all(name in states for name in names):
            with torch.enable_grad():
                grads = torch.autograd.grad(p.sum(), [states[name] for name in names])
            return {n: states[n].detach() for n in names}, {n: g.detach() for n, g in zip(names, grads)}
    rows = setup.n if corrupted else 1
    noisy = corrupt_embeddings(setup) if corrupted else (lambda x: x.clone())
    embed = lambda x: noisy(x.detach()).requires_grad_(True)  # noqa: E731
    with torch.enable_grad():
        states = lm.runner.read(names, full=True, detach=False, input_ids=setup.input_ids.repeat(rows, 1),
                                edit=lambda hooks: hooks.set("embed", embed))
        p = lm.runner.answer_logprob(states.hidden[:, -1], setup.answer_id, norm=False).exp()
        grads = torch.autograd.grad(p.sum(), [states[name] for name in names])
    return {n: states[n].detach() for n in names}, {n: g.detach() for n, g in zip(names, grads)}


def spearman(a, b) -> float:
    """Spearman's rank correlation of two equally shaped arrays (average ranks for ties); nan if one is constant."""
    x, y = _ranks(_host(a)), _ranks(_host(b))
    if x.std() == 0 or y.std() == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def _host(a) -> np.ndarray:
    """A flat float64 array of `a`, which may be a tensor on a GPU (numpy reads host memory only)."""
    if isinstance(a, torch.Tensor):
        a = a.detach().to("cpu", torch.float64)
    return np.asarray(a, float).ravel()


def _ranks(v: np.ndarray) -> np.ndarray:
    order = np.argsort(v, kind="mergesort")
    ranks = np.empty(len(v))
    ranks[order] = np.arange(len(v), dtype=float)
    for value in np.unique(v):  # ties share their average rank
        tied = v == value
        if tied.sum() > 1:
            ranks[tied] = ranks[tied].mean()
    return ranks
