"""Target vectors found by gradient descent: what every editing method writes (the "compute_v" half of
kmeng01/rome; the keys, its "compute_u" half, are in keys.py).

Targets (ROME Eq. 4; MEMIT Eq. 16; PMET Eq. 10): free vectors delta_site are added to the output of one or
more "sites" (the MLP output for ROME, the block output (residual) for MEMIT and AlphaEdit, the attention and
MLP outputs for PMET) at the subject's last token of every prompt, and optimized with Adam to minimize
    NLL(target_new | context + prompt)                       (averaged over templates and target tokens)
  + kl_factor * KL(P_orig || P_delta) on "{subject} is a"   (at the subject's last token, as upstream)
  + v_weight_decay * ||delta|| / ||init||^2,
with ||delta|| clamped to clamp_norm_factor * ||init|| after each step, and, with v_max_norm, to that norm
(editkit's shift bound, not ENCORE's: its norm constraint acts on the weight update, MEMIT's
update_norm_lambda). Each request stops by the rules of target_stops.py. The result is one `Targets` per
request.

Where the work is: the rows are run once and each step runs only the blocks from the edited layer up
(target_rows.py). Several requests are optimized in one batch: their losses are summed, so each request's
gradient is that of its own loss, and Adam works elementwise, which makes this the same as optimizing them one
by one; a request that meets its stopping rule is frozen (its rows keep being computed with its final delta)
and the rows are rebuilt for the rest once half the batch has stopped. Requests may share one delta
(joint.py).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from ..core.errors import EditkitError
from ..model.vocab import vocab_logsumexp
from .joint import Joint, Tie
from .memo import Encoded, memoized, missing_alone, remember_alone
from .requests import EditRequest
from .target_rows import Deltas, TargetRows
from .target_stops import Tracker, adaptive_rule, stabiliser_stops

if TYPE_CHECKING:
    from ..model.lm import LM

Progress = Callable[[float, str], None]


@dataclass(frozen=True)
class SiteTarget:
    """One site's target at the subject's last token of the plain prompt: the site's output without the edit
    (`init`: v, m or h), the optimized shift (`delta`) and the vector the edit writes (`target`: init + delta,
    or what norm-anchor scaling made of it)."""

    init: torch.Tensor
    delta: torch.Tensor
    target: torch.Tensor


@dataclass(frozen=True)
class NasReport:
    """What norm-anchor scaling did to one request's value vector (anchor.py): ||v*|| before, ||v* - v|| (what
    the shift bound v_max_norm bounds), whether the edit was skipped, and the norm written."""

    v_star_norm: float
    shift_norm: float
    skipped: bool
    written_norm: float

    def to_dict(self) -> dict[str, Any]:
        return {"v_star_norm": self.v_star_norm, "shift_norm": self.shift_norm, "skipped": self.skipped,
                "written_norm": self.written_norm}


@dataclass(frozen=True)
class Targets:
    """One request's optimized targets: per site a SiteTarget, the loss at every step (step, loss, nll, kl,
    p_target, and stopped_by where a stabiliser stopped it), whether the shift bound held the target short
    (None without one) and NAS's rescaling (None without it)."""

    sites: dict[str, SiteTarget]
    losses: list[dict[str, Any]] = field(default_factory=list)
    held_at_bound: bool | None = None
    nas: NasReport | None = None

    def at(self, site: str) -> SiteTarget:
        if site not in self.sites:
            raise EditkitError(f"no target at {site}; optimized at {', '.join(self.sites)}")
        return self.sites[site]

    def with_target(self, site: str, target: torch.Tensor, nas: NasReport) -> Targets:
        """These targets with `site` writing `target` instead (its shift follows), as NAS rescales them."""
        t = self.at(site)
        return replace(self, sites={**self.sites, site: SiteTarget(t.init, target - t.init, target)}, nas=nas)

    def details(self) -> dict[str, Any]:
        """The stabilisers' diagnostics for RequestReport.details (JSON): NAS's rescaling and whether the
        shift bound held the target short, where they are on."""
        out: dict[str, Any] = {}
        if self.nas is not None:
            out["nas"] = self.nas.to_dict()
        if self.held_at_bound is not None:
            out["held_at_bound"] = self.held_at_bound
        return out

    def clone(self) -> Targets:
        """A copy whose tensors and loss rows are its own (memo.py keeps one, callers get another)."""
        return Targets({s: SiteTarget(t.init.clone(), t.delta.clone(), t.target.clone())
                        for s, t in self.sites.items()}, [dict(x) for x in self.losses], self.held_at_bound,
                       self.nas)


# --- the memo's form (memo.py) --------------------------------------------------------------------------
_PARTS = ("init", "delta", "target")


def encode(results: list[Targets]) -> Encoded:
    """Requests' targets as the memo keeps them: tensors named <request>/<site>/<part>, the rest as JSON."""
    tensors = {f"{j}/{s}/{name}": getattr(t, name) for j, r in enumerate(results) for s, t in r.sites.items()
               for name in _PARTS}
    meta = {"sites": [list(r.sites) for r in results], "losses": [r.losses for r in results],
            "held_at_bound": [r.held_at_bound for r in results],
            "nas": [r.nas.to_dict() if r.nas is not None else None for r in results]}
    return tensors, meta


def decode(encoded: Encoded) -> list[Targets]:
    """The targets `encode` wrote."""
    tensors, meta = encoded
    return [Targets({s: SiteTarget(*(tensors[f"{j}/{s}/{name}"] for name in _PARTS)) for s in sites}, losses,
                    held, NasReport(**nas) if nas is not None else None)
            for j, (sites, losses, held, nas) in enumerate(zip(meta["sites"], meta["losses"],
                                                              meta["held_at_bound"], meta["nas"]))]


# --- the loss -----------------------------------------------------------------------------------------------
@dataclass
class KlReference:
    """P_orig of each request's KL row, kept from the first step (when every request is active): its
    log-probabilities (the full-softmax path), or E_P0[w] and the bracket x0 . E_P0[w] - lse(W x0) (the fused
    path of loss_terms)."""

    logp: torch.Tensor | None = None
    mean: torch.Tensor | None = None
    neg_entropy: torch.Tensor | None = None


def loss_terms(lm: LM, rows: TargetRows, deltas: Deltas, init: dict[str, torch.Tensor] | None,
               reference: bool, kl0: KlReference,
               act: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The log-probability (T,) and argmax (T,) of every scored target token and, per request in `act`,
    KL(P_orig || P_delta) on its KL row (kl0 keeps P_orig from the first call, when every request is active).

    Fast path (a plain linear unembedding, logits W x + b): each loss term is lse(W x + b) minus an affine
    function of x, so one pass over the vocabulary gives the values and the gradient (vocab.vocab_logsumexp,
    no (N, V) logits held):
        log p(t | x) = w_t . x + b_t - lse(W x + b)
        KL(P0 || P_x) = sum_v P0_v log P0_v - sum_v P0_v (w_v . x - lse(W x))
                      = [x0 . E_P0[w] - lse(W x0)] - x . E_P0[w] + lse(W x), with E_P0[w] and the bracket
    taken once from the first step's pass (x = x0; a bias adds E_P0[b] to both brackets, which cancels). The
    same numbers as the softmax over full logits (the `reference` path, and models
    with a softcap), up to rounding."""
    fused = None
    if not reference:
        x = rows.states(deltas, init)
        fused = vocab_logsumexp(lm, x.float())  # the loss in float32 whatever the model's dtype
    T = len(rows.t_row)
    if fused is None:
        if reference:
            rw, kl_logits = rows.logits(deltas, init, reference=True)
        else:
            logits = lm.runner.logits(x, norm=False)
            rw, kl_logits = logits[:T], logits[T:]
        tok_logp = torch.log_softmax(rw, -1).gather(1, rows.t_tok_t[:, None])[:, 0]
        kl_logp = torch.log_softmax(kl_logits, -1)
        if kl0.logp is None:
            kl0.logp = kl_logp.detach().clone()
        ref = kl0.logp[act]
        return tok_logp, rw.argmax(-1), (ref.exp() * (ref - kl_logp)).sum(-1)
    (lse, mean_w, best), x = fused, x.float()
    W, bias = lm.runner._head_weight()  # as this context sees it, the weight vocab_logsumexp used
    tok_logp = (x[:T] * W[rows.t_tok_t]).sum(-1) - lse[:T]
    if bias is not None:
        tok_logp = tok_logp + bias[rows.t_tok_t]
    x_kl, lse_kl = x[T:], lse[T:]
    if kl0.mean is None or kl0.neg_entropy is None:
        kl0.mean = mean_w[T:].detach().clone()
        kl0.neg_entropy = ((x_kl * kl0.mean).sum(-1) - lse_kl).detach()
    kl = kl0.neg_entropy[act] - (x_kl * kl0.mean[act]).sum(-1) + lse_kl
    return tok_logp, best[:T], kl


def adam_step(p: torch.Tensor, g: torch.Tensor, state: dict[str, torch.Tensor], lr: float, t: int,
              b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> None:
    """One step of Adam (torch.optim.Adam's defaults) on rows of p; elementwise, so rows are independent."""
    state["m"].mul_(b1).add_(g, alpha=1 - b1)
    state["v"].mul_(b2).addcmul_(g, g, value=1 - b2)
    p.sub_(lr * (state["m"] / (1 - b1 ** t)) / ((state["v"] / (1 - b2 ** t)).sqrt() + eps))


def clamped(p: torch.Tensor, limit: torch.Tensor | float) -> torch.Tensor:
    """Rows of p longer than `limit` scaled down to it (MEMIT/ROME's norm clamp; the shift bound)."""
    norm = p.norm(dim=1, keepdim=True)
    return torch.where(norm > limit, p * limit / norm, p)


# --- the optimisation ---------------------------------------------------------------------------------------
class _Optimisation:
    """One batch's optimisation (module docstring): the deltas, Adam's moments and each request's losses
    between steps, and the requests still optimized (`batch`, whose rows are prepared; `running` per batch
    position)."""

    def __init__(self, lm: LM, requests: list[EditRequest], layers: list[int], sites: tuple[str, ...],
                 hp: Any, adaptive: bool, reference: bool, joint: Joint | None) -> None:
        n, d, dev = len(requests), lm.adapter.d_model, lm.device
        self.lm, self.requests, self.layers, self.sites, self.hp = lm, requests, layers, sites, hp
        self.adaptive, self.reference = adaptive, reference
        self.tied = Tie(joint, layers, n, dev)
        self.delta = {s: torch.zeros(n, d, device=dev) for s in sites}
        self.adam = {s: {"m": torch.zeros(n, d, device=dev), "v": torch.zeros(n, d, device=dev)}
                     for s in sites}
        self.init: dict[str, torch.Tensor] = {}
        self.kl0 = KlReference()  # the original distribution of each request's KL row, from the first step
        self.losses: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        self.batch = list(range(n))
        self.rows = TargetRows(lm, requests, layers, sites, hp)
        self.running = torch.ones(n, dtype=torch.bool, device=dev)
        self.tracker = Tracker.of(n, dev)

    def run(self, progress: Progress | None) -> list[Targets]:
        steps = self.hp.v_num_grad_steps
        for step in range(steps):
            if progress:
                left = int(self.running.sum())
                progress(step / steps, f"targets: step {step + 1}/{steps}, {left} request(s) left")
            act = torch.tensor(self.batch, device=self.lm.device)
            with torch.enable_grad():
                d_act = {s: self.delta[s][act].clone().requires_grad_(True) for s in self.sites}
                loss, done = self._loss(step, d_act, act)
                if step == steps - 1:
                    break
                keep = self.running & ~done
                if not bool(keep.any()):
                    break
                (loss * keep * self.tied.weight[act]).sum().backward()  # type: ignore[no-untyped-call]
            with torch.no_grad():
                self._update(step, act, keep, d_act)
            self.running = keep
            if int(self.running.sum()) <= len(self.batch) // 2:  # rebuild the rows once half have stopped
                self.batch = [j for i, j in enumerate(self.batch) if bool(self.running[i])]
                self.rows = TargetRows(self.lm, [self.requests[j] for j in self.batch],
                                       [self.layers[j] for j in self.batch], self.sites, self.hp)
                self.running = torch.ones(len(self.batch), dtype=torch.bool, device=self.lm.device)
        return self._results()

    def _loss(self, step: int, d_act: Deltas, act: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each batch request's loss (module docstring) and whether it is done; records the step's numbers."""
        hp, dev, n, rows = self.hp, self.lm.device, len(self.batch), self.rows
        first: dict[str, torch.Tensor] | None = {} if not self.init else None
        tok_logp, argmax, kl = loss_terms(self.lm, rows, d_act, first, self.reference, self.kl0, act)
        if first is not None:
            self.init = first
        tok_nll = -tok_logp * rows.t_weight
        nll = torch.zeros(n, device=dev).index_add(0, rows.t_req_t, tok_nll)  # per request
        decay: torch.Tensor = sum(d_act[s].norm(dim=1) / self.init[s][act].norm(dim=1) ** 2
                                  for s in self.sites)
        w = torch.full((n,), float(hp.nll_loss_factor), device=dev)
        done = torch.zeros(n, dtype=torch.bool, device=dev)
        if self.adaptive:  # PMET App. D: a lower NLL weight once the target wins; stop when KL is small
            w, done = adaptive_rule(rows, n, argmax, kl, w)
        loss = w * nll + hp.kl_factor * kl + hp.v_weight_decay * decay
        if not bool(torch.isfinite(loss).all()):
            raise EditkitError("the target optimisation diverged (loss is not finite); lower v_lr")
        if not self.adaptive:
            done = loss.detach() < hp.v_stop_loss  # upstream's early stop
        stop = stabiliser_stops(hp, rows, self.batch, tok_logp.detach(), argmax, loss.detach(), self.tracker)
        if stop is not None:
            done = done | stop
        done = self.tied.all_done(self.batch, act, done)
        for i, j in enumerate(self.batch):
            if not self.running[i]:
                continue  # stopped earlier; its rows are still computed until the batch is rebuilt
            self.losses[j].append({"step": step, "loss": loss[i].item(), "nll": nll[i].item(),
                                   "kl": kl[i].item(),
                                   "p_target": float(torch.exp(-nll[i].detach() * rows.n_tok[i]))})
            if stop is not None and bool(stop[i]):
                self.losses[j][-1]["stopped_by"] = self.tracker.why[i]
        return loss, done

    def _update(self, step: int, act: torch.Tensor, keep: torch.Tensor, d_act: Deltas) -> None:
        """Adam's step on the deltas still optimized, then the norm clamp and the shift bound."""
        hp = self.hp
        for s in self.sites:
            rows_k = act[keep]
            p = d_act[s].detach()[keep]
            grad = d_act[s].grad
            assert grad is not None, "the loss's backward reached every delta"
            g = self.tied.gradient(self.batch, grad)[keep]
            st = {"m": self.adam[s]["m"][rows_k], "v": self.adam[s]["v"][rows_k]}
            adam_step(p, g, st, hp.v_lr, step + 1)
            self.adam[s]["m"][rows_k], self.adam[s]["v"][rows_k] = st["m"], st["v"]
            init_norm = self.init[s][self.tied.owner(rows_k)].norm(dim=1, keepdim=True)
            p = clamped(p, hp.clamp_norm_factor * init_norm)
            if hp.v_max_norm > 0:  # the shift bound, in model units
                p = clamped(p, hp.v_max_norm)
            self.delta[s][rows_k] = p

    def _results(self) -> list[Targets]:
        hp, out = self.hp, []
        for j in range(len(self.requests)):
            sites = {s: SiteTarget(self.init[s][j], self.delta[s][j].clone(),
                                   self.init[s][j] + self.delta[s][j]) for s in self.sites}
            # the shift bound held this target short (a bound on the wrong scale holds them all)
            held = any(float(self.delta[s][j].norm()) >= hp.v_max_norm * (1 - 1e-6) for s in self.sites) \
                if hp.v_max_norm > 0 else None
            out.append(Targets(sites, self.losses[j], held))
        return out


def _optimize(lm: LM, requests: list[EditRequest], layer: int | list[int], sites: tuple[str, ...], hp: Any,
              adaptive: bool = False, progress: Progress | None = None, reference: bool = False,
              joint: Joint | None = None) -> list[Targets]:
    n = len(requests)
    layers = list(layer) if isinstance(layer, (list, tuple)) else [layer] * n
    if len(layers) != n:
        raise EditkitError("give one layer, or one layer per request")
    return _Optimisation(lm, requests, layers, sites, hp, adaptive, reference, joint).run(progress)


@memoized(encode, decode)  # only inside memo.reuse_targets() (sweeps): an identical optimisation is reused
def optimize_targets_batch(lm: LM, requests: list[EditRequest], layer: int | list[int],
                           sites: tuple[str, ...], hp: Any, adaptive: bool = False,
                           progress: Progress | None = None, reference: bool = False,
                           joint: Joint | None = None) -> list[Targets]:
    """Optimize one delta per site and request at `layer` (or at layer[j] for request j: a layer sweep in one
    batch); returns each request's Targets (the loss: module docstring). `reference` runs the plain full model
    at every step instead of the cached fast path (same result; for benchmarks). `joint`: requests that share
    one delta, optimized on their summed losses (joint.Joint)."""
    return _optimize(lm, requests, layer, sites, hp, adaptive, progress, reference, joint)


def optimize_targets(lm: LM, request: EditRequest, layer: int, sites: tuple[str, ...], hp: Any,
                     adaptive: bool = False, progress: Progress | None = None,
                     reference: bool = False) -> Targets:
    """One request's targets (see optimize_targets_batch)."""
    return optimize_targets_batch(lm, [request], layer, sites, hp, adaptive, progress, reference)[0]


def optimize_layers(lm: LM, request: EditRequest, layers: list[int], sites: tuple[str, ...], hp: Any,
                    adaptive: bool = False, progress: Progress | None = None) -> int:
    """A layer sweep's targets: `request` at every layer of `layers`, optimized in one batch (the rows of each
    layer join at its block: target_rows.py) and kept in the active memo (memo.reuse_targets) under each
    layer's one-request key, so the edits at each layer that follow reuse them instead of optimizing alone.
    Returns how many were optimized (0 outside reuse_targets(), or when every layer's targets were known)."""
    todo = missing_alone(lm, [request] * len(layers), layers, sites, hp, adaptive)
    if not todo:
        return 0
    chosen = [layers[j] for j in todo]
    results = _optimize(lm, [request] * len(chosen), chosen, sites, hp, adaptive, progress)
    remember_alone(lm, [request] * len(chosen), chosen, sites, hp, adaptive, [encode([r]) for r in results])
    return len(chosen)
