"""One loaded model, many users: each session's edits exist only inside its own computations.

A served app keeps one copy of the base model per process (loading Gemma twice would double the memory). A session
runs its computations inside `session(lm, deltas)`:

    with isolation.session(lm, my_deltas):
        ...forward passes see base weights + my_deltas, nobody else's...

The deltas act only in this thread's (this context's) forward passes (weights.applied: a per-context hook
recomputes each edited linear map with W + delta), and the shared parameters are never written. So sessions do not
wait for each other: a prediction on the home page runs while another student's trace and a third one's edit are
computing. Library code needs no session to be safe (nothing in editkit changes the shared weights); a session is
only how a page says "with my edits". Sessions nest: inner deltas stack on the outer ones.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from . import weights
from .weights import WeightDelta

if TYPE_CHECKING:
    from .lm import LM


@contextmanager
def session(lm: LM, deltas: WeightDelta | Sequence[WeightDelta] = ()) -> Iterator[LM]:
    """Run a block with `deltas` (one delta dict or a list of them, summed) added to the weights this context sees."""
    if isinstance(deltas, dict):
        deltas = [deltas]
    if not deltas:  # nothing to apply: the model is not even asked for (a deferred load stays pending)
        yield lm
        return
    with weights.applied(lm, weights.combined(list(deltas))):
        yield lm
