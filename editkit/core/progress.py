"""Progress callbacks, one signature everywhere: progress(fraction, message).

`fraction` runs from 0 to 1 over the whole computation and `message` says what is being done, in words a user
reads under a progress bar ("statistics of layer 4: 8,000 / 20,000 tokens"). A job's callback may raise
errors.Cancelled to stop the computation at its next step. `part` hands a sub-computation its share of the bar.
Time estimates in messages are said one way (`time_left`), so a caller that adds its own can tell when a part
already gave one (`gives_time`).
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


LEFT = " left"  # the end of every time estimate a message carries


def duration(seconds: float) -> str:
    """'about 40 s' / 'about 3.5 min'."""
    return f"about {seconds:.0f} s" if seconds < 120 else f"about {seconds / 60:.1f} min"


def time_left(seconds: float) -> str:
    """'about 40 s left' / 'about 3.5 min left': the one way a progress message says how long is left."""
    return duration(seconds) + LEFT


def eta(elapsed: float, done: float, total: float) -> str:
    """time_left from the rate so far (`done` of `total` in `elapsed` seconds)."""
    if done <= 0 or done >= total:
        return "almost done" if done >= total else "estimating time"
    return time_left(elapsed / done * (total - done))


def gives_time(message: str) -> bool:
    """Whether a progress message already says how long its part has left (time_left / eta)."""
    return LEFT in message or "estimating time" in message
