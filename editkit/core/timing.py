"""Where a start-up's time goes: the library names its steps (`phase`), and a benchmark that asks
(`recording`) gets their durations; without a recording a phase costs nothing (editkit bench startup reads
them).

    with recording() as phases:
        load_model("gemma-3-270m")
    phases  # [("config", 0.05), ("tokenizer", 0.9), ("weights", 0.6), ("check", 0.3)]
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_PHASES: ContextVar[list[tuple[str, float]] | None] = ContextVar("editkit_phases", default=None)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as `name` when a recording is on in this context. Phases are not nested (a name may come
    back, as the weights' load and their move to the device: a reader sums them)."""
    phases = _PHASES.get()
    if phases is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        phases.append((name, time.perf_counter() - start))


@contextmanager
def recording() -> Iterator[list[tuple[str, float]]]:
    """The (name, seconds) of every phase that ends inside the block, in order."""
    phases: list[tuple[str, float]] = []
    token = _PHASES.set(phases)
    try:
        yield phases
    finally:
        _PHASES.reset(token)
