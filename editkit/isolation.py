"""One loaded model, many users: each session's edits exist only while its own computation runs.

A served app keeps one copy of the base model per process (loading Gemma twice would double the memory). Every
computation that reads or changes the weights runs inside `session(lm, deltas)`:

    with isolation.session(lm, my_deltas, on_wait=lambda: st.info("waiting...")):
        ...forward passes see base weights + my_deltas, nobody else's...

which takes the model's lock (so weight changes are serialized), applies the session's deltas, and restores the
base weights bitwise when the block ends, also when it raises. Threads of other sessions wait for the lock, so no
computation ever observes another session's edit. The lock is re-entrant: library code that applies
intermediate updates (MEMIT layer by layer) may nest its own `session(lm)` inside.
"""
from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager

from .editing import weights

_locks: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


def model_lock(lm) -> threading.RLock:
    """The re-entrant lock that serializes all use of `lm`'s weights (one per loaded torch model)."""
    model = getattr(lm, "model", lm)
    with _locks_guard:
        lock = _locks.get(model)
        if lock is None:
            lock = _locks[model] = threading.RLock()
        return lock


@contextmanager
def session(lm, deltas=(), on_wait=None):
    """Hold the model, with `deltas` (one delta dict or a list of them, applied in order) added to its weights.

    `on_wait()` is called once if another session holds the model, before blocking (for a "waiting" message).
    """
    if isinstance(deltas, dict):
        deltas = [deltas]
    lock = model_lock(lm)
    if not lock.acquire(blocking=False):
        if on_wait is not None:
            on_wait()
        lock.acquire()
    try:
        delta = weights.combined(list(deltas)) if deltas else {}
        with weights.applied(getattr(lm, "model", lm), delta):
            yield lm
    finally:
        lock.release()
