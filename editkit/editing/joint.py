"""Requests that share one target delta (co-edit's joint targets, editing/methods/coedit.py): `Joint` says
which, `Tie` applies it during one target optimisation (targets.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..core.errors import EditkitError


@dataclass(frozen=True)
class Joint:
    """Requests that share target deltas (co-edit's joint targets: a fact and its implications about the same
    subject, written where the same subject's keys are; separate deltas at nearly equal keys would be averaged
    by the least-squares solve, each halved). tie[j]: the request whose delta j shares (tie[k] = k for each
    owner); weights[j]: j's weight in that delta's summed loss (None: 1 each; a stopping rule reads its
    unweighted loss); holds[j]: whether j's stopping rule must hold before its group stops (None: every
    member's; an owner's always does). A member that does not hold pulls on the delta while it runs but never
    keeps it running (co-edit's kept relations: one the new fact pulls against may never reach its rule)."""
    tie: tuple[int, ...]
    weights: tuple[float, ...] | None = None
    holds: tuple[bool, ...] | None = None

    def check(self, layers: list[int]) -> None:
        n, tie = len(layers), self.tie
        if len(tie) != n or any(not 0 <= k < n or tie[k] != k or layers[k] != layers[j]
                                for j, k in enumerate(tie)):
            raise EditkitError("tie: one owner per request, an owner ties to itself, both at the same layer")
        if self.weights is not None and (len(self.weights) != n or any(not w >= 0 for w in self.weights)):
            raise EditkitError("weights: one non-negative weight per request")
        if self.holds is not None and (len(self.holds) != n or not all(self.holds[k] for k in set(tie))):
            raise EditkitError("holds: one flag per request, and every owner's stopping rule holds its group")

    def key(self) -> list[Any]:
        """What a target memo key holds of it (editing/memo.py)."""
        return [list(self.tie)] + ([["weights", *self.weights]] if self.weights else []) + \
            ([["holds", *self.holds]] if self.holds and not all(self.holds) else [])


class Tie:
    """A Joint during one optimisation: a shared delta is optimized on the sum of its requests' (weighted)
    losses: its gradient is the sum of theirs, every member gets the same Adam step (same state, same
    gradient, so the copies stay equal), the norm clamp is the owner's, and the group stops once each member
    that holds its stop has met its stopping rule."""

    def __init__(self, joint: Joint | None, layers: list[int], n: int, dev: torch.device) -> None:
        tie = joint.tie if joint is not None else tuple(range(n))
        if joint is not None:
            joint.check(layers)
        self.on = any(k != j for j, k in enumerate(tie))
        self.tie = list(tie)
        self.tie_t = torch.tensor(self.tie, device=dev)
        self.weight = torch.tensor(joint.weights if joint and joint.weights else [1.0] * n, device=dev)
        self.holds = torch.tensor(joint.holds if joint and joint.holds else [True] * n, device=dev)
        # the batch positions of the last batch asked (it changes rarely)
        self._batch: list[int] | None = None
        self._at = torch.zeros(0, dtype=torch.long)

    def owner(self, rows: torch.Tensor) -> torch.Tensor:
        return self.tie_t[rows] if self.on else rows

    def _pos(self, batch: list[int]) -> torch.Tensor:
        """Each batch position's owner's position (members stop together: an owner is in every batch of
        theirs)."""
        if batch != self._batch:
            place = {j: i for i, j in enumerate(batch)}
            self._batch = list(batch)
            self._at = torch.tensor([place[self.tie[j]] for j in batch], device=self.tie_t.device)
        return self._at

    def all_done(self, batch: list[int], act: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        if not self.on:
            return done
        pos = self._pos(batch)
        left = torch.zeros(len(batch), device=done.device).index_add(0, pos,
                                                                      (~done & self.holds[act]).float())
        return left[pos] == 0

    def gradient(self, batch: list[int], g: torch.Tensor) -> torch.Tensor:
        if not self.on:
            return g
        pos = self._pos(batch)
        return torch.zeros_like(g).index_add(0, pos, g)[pos]
