"""When a target optimisation (targets.py) stops, per request: upstream's rule (loss < v_stop_loss), PMET's
adaptive rule (App. D: once the target is the argmax at every target position the NLL weight drops to 0.1, and
it stops when KL <= 0.01), and the stabilisers (ENCORE, Gupta et al. 2025, arXiv 2502.01636,
encore/compute_z.py; off unless chosen): stop once the target is the most probable token (v_stop_top1), once
its mean probability passes v_stop_prob, or once the loss stalls (v_stop_stall)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .target_rows import TargetRows


@dataclass
class Tracker:
    """What the stabilisers count across steps, per request (not per batch place): the steps at which the
    target was the argmax everywhere (`top1`), the previous loss (`prev`), and the rule that stopped each
    batch position at the last step (`why`: "top1", "prob", "stall" or "")."""

    top1: torch.Tensor
    prev: dict[int, float] = field(default_factory=dict)
    why: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, n: int, dev: torch.device) -> Tracker:
        return cls(torch.zeros(n, dtype=torch.long, device=dev))


def adaptive_rule(rows: TargetRows, n: int, argmax: torch.Tensor, kl: torch.Tensor,
                  w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """PMET App. D: (the NLL weights, lowered to 0.1 x once the target wins at every target position; which
    requests stop: those, once KL <= 0.01)."""
    hit = (argmax == rows.t_tok_t).float()
    all_hit = torch.zeros(n, device=w.device).index_add(0, rows.t_req_t, 1 - hit) == 0
    return torch.where(all_hit, 0.1 * w, w), all_hit & (kl.detach() <= 0.01)


def stabiliser_stops(hp: Any, rows: TargetRows, batch: list[int], tok_logp: torch.Tensor,
                     argmax: torch.Tensor, loss: torch.Tensor, tracker: Tracker) -> torch.Tensor | None:
    """Which requests of the batch the stabilisers stop at this step (None when none is on, so that the
    optimisation is the plain one, bit for bit). ENCORE (Gupta et al. 2025, encore/compute_z.py):
    - v_stop_top1 = n: stop at the n-th step (counted per request, not necessarily consecutive) at which the
      new target is the argmax at every target position of every template ("most-probable early stopping");
    - v_stop_prob = p: stop once mean_templates exp(-mean_tokens NLL) > p (the mean probability of the
      target);
    and v_stop_stall = r: stop once a step lowers the loss by less than r x the previous loss. `tracker` keeps
    the per-request counts and losses across steps and the rule that stopped each position."""
    if not (hp.v_stop_top1 > 0 or hp.v_stop_prob > 0 or hp.v_stop_stall > 0):
        return None
    dev = loss.device
    n = len(batch)
    act = torch.tensor(batch, device=dev)
    stop = torch.zeros(n, dtype=torch.bool, device=dev)
    why = [""] * n
    if hp.v_stop_top1 > 0:
        miss = (argmax != rows.t_tok_t).float()
        all_hit = torch.zeros(n, device=dev).index_add(0, rows.t_req_t, miss) == 0
        tracker.top1[act] += all_hit.long()
        hit = tracker.top1[act] >= hp.v_stop_top1
        why = ["top1" if h and not w else w for h, w in zip(hit.tolist(), why)]
        stop |= hit
    if hp.v_stop_prob > 0:
        row_nll = torch.zeros(len(rows.ids), device=dev).index_add(0, rows.t_row_t, -tok_logp * rows.t_share)
        tmpl = sorted(set(rows.t_row))  # the template rows (every row but the KL rows)
        per_row = torch.exp(-row_nll[tmpl])
        req = rows.req_t[tmpl]
        n_rw = torch.tensor(rows.n_rw, device=dev, dtype=per_row.dtype)
        p_mean = torch.zeros(n, device=dev).index_add(0, req, per_row / n_rw[req])
        hit = p_mean > hp.v_stop_prob
        why = ["prob" if h and not w else w for h, w in zip(hit.tolist(), why)]
        stop |= hit
    if hp.v_stop_stall > 0:
        prev = tracker.prev
        hit = torch.tensor([j in prev and prev[j] - float(l) < hp.v_stop_stall * prev[j]
                            for j, l in zip(batch, loss.tolist())], device=dev)
        for j, l in zip(batch, loss.tolist()):
            prev[j] = float(l)
        why = ["stall" if h and not w else w for h, w in zip(hit.tolist(), why)]
        stop |= hit
    tracker.why = why
    return stop
