"""Progress callbacks, one signature everywhere: progress(fraction, message).

`fraction` runs from 0 to 1 over the whole computation and `message` says what is being done, in words a user
reads under a progress bar ("statistics of layer 4: 8,000 / 20,000 tokens"). A job's callback may raise
errors.Cancelled to stop the computation at its next step. `part` hands a sub-computation its share of the bar.
"""
from __future__ import annotations

from typing import Callable

Progress = Callable[[float, str], None]


def silent(fraction: float, message: str) -> None:
    """A progress callback that shows nothing (the default of every computation that takes one)."""


def part(progress: Progress | None, start: float, end: float, prefix: str = "") -> Progress:
    """The callback for a sub-computation that covers [start, end] of `progress`'s bar (its messages prefixed
    with `prefix`); silent when `progress` is None."""
    if progress is None:
        return silent
    return lambda fraction, message: progress(start + (end - start) * fraction, prefix + message)
