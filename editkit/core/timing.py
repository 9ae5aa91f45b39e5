"""Where a start-up's time goes: the library names its steps (`phase`), and a benchmark that asks
(`recording`) gets their durations; without a recording a phase costs nothing (editkit bench startup reads
them).

    with recording() as phases:
        load_model("gemma-3-270m")
    phases  # [("config", 0.05, 0.05), ("tokenizer", 0.9, 0.9), ...]: name, wall seconds, CPU seconds
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Phase = tuple[str, float, float]  # name, wall seconds, CPU seconds of the process (all its threads)
_PHASES: ContextVar[list[Phase] | None] = ContextVar("editkit_phases", default=None)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as `name` when a recording is on in this context. Phases are not nested (a name may come
    back, as the weights' load and their move to the device: a reader sums them)."""
    phases = _PHASES.get()
    if phases is None:
        yield
        return
    start, cpu = time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        phases.append((name, time.perf_counter() - start, time.process_time() - cpu))


@contextmanager
def recording() -> Iterator[list[Phase]]:
    """The (name, wall seconds, CPU seconds) of every phase that ends inside the block, in order (CPU seconds
    tell more than wall seconds on a busy machine)."""
    phases: list[Phase] = []
    token = _PHASES.set(phases)
    try:
        yield phases
    finally:
        _PHASES.reset(token)
