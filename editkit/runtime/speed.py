"""How fast this machine computes for a job right now, so that a duration measured under one load can be said
under another: Edit & compare estimated "About 3 min" from timings of an idle machine and took 571 s while other
work shared its two cores.

`rate()` measures it: a short float32 matrix-multiply probe (about 0.1 s of work on an idle core) in a thread at a
job's CPU priority (jobs.background_priority), re-measured at most every PROBE_AGE seconds. A recorded duration
keeps the rate measured when it was recorded; `now(seconds, then)` scales it by then / rate(), and a duration
recorded without one by the fastest rate seen on this machine (`fastest`, kept in the cache), as if it had been
measured on the machine at its best.
"""
from __future__ import annotations

import threading
import time

from ..core.cache import Store
from .jobs import background_priority

PROBE_SIZE, PROBE_REPEATS = 384, 8  # 2 * 384^3 * 8 = 0.9 GFLOP
PROBE_AGE = 20.0  # s a measured rate stays valid
SPEED = Store("speed")
_LOCK = threading.Lock()
_LAST: dict = {}  # "rate", "at"


def _probe() -> float:
    """GFLOP/s of float32 matrix multiplies in a thread at a job's priority (a job computes at that priority)."""
    import torch

    out: dict = {}

    def run() -> None:
        with background_priority(), torch.no_grad():
            a = torch.randn(PROBE_SIZE, PROBE_SIZE)
            a @ a  # the first call allocates and warms the kernels
            t0 = time.perf_counter()
            for _ in range(PROBE_REPEATS):
                a = (a @ a) / PROBE_SIZE
            out["seconds"] = time.perf_counter() - t0

    worker = threading.Thread(target=run, name="editkit-speed-probe", daemon=True)
    worker.start()
    worker.join()
    return 2 * PROBE_SIZE ** 3 * PROBE_REPEATS / out["seconds"] / 1e9


def rate() -> float:
    """This machine's float32 rate for a job now (GFLOP/s), measured at most every PROBE_AGE seconds; the
    fastest rate seen is kept in the cache."""
    with _LOCK:
        if _LAST and time.monotonic() - _LAST["at"] < PROBE_AGE:
            return _LAST["rate"]
        measured = _probe()
        _LAST.update(rate=measured, at=time.monotonic())
        path = SPEED.path("machine")
        kept = SPEED.get(path) or {}
        if measured > kept.get("fastest", 0.0):
            SPEED.put(path, {**kept, "fastest": round(measured, 2)})
        return measured


def fastest() -> float:
    """The fastest rate seen on this machine (GFLOP/s; the rate now when none is kept yet)."""
    return (SPEED.get(SPEED.path("machine")) or {}).get("fastest") or rate()


def now(seconds: float, then: float | None = None) -> float:
    """`seconds` measured at rate `then` (GFLOP/s; None: at the fastest rate seen), as long as it takes now."""
    return seconds * (then or fastest()) / rate()


def slowdown() -> float:
    """How many times longer a job takes now than on this machine at its best (1.0 or more)."""
    return max(1.0, fastest() / rate())
