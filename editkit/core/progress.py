"""Progress callbacks, one signature everywhere: progress(fraction, message).

`fraction` runs from 0 to 1 over the whole computation and `message` says what is being done, in words a user
reads under a progress bar ("statistics of layer 4: 8,000 / 20,000 tokens"). A job's callback may raise
errors.Cancelled to stop the computation at its next step. `part` hands a sub-computation its share of the bar.
Time estimates in messages are said one way (`time_left`), so a caller that adds its own can tell when a part
already gave one (`gives_time`).
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable

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


def to_stderr(fraction: float, message: str) -> None:
    """A progress callback that prints each message on stderr ("[editkit] message"): the command line's loads,
    and a deferred load, which runs inside another call whose own bar is showing."""
    print(f"[editkit] {message}", file=sys.stderr, flush=True)


def duration(seconds: float) -> str:
    """'40 s' below a minute and a half, else whole minutes rounded up ('4 min': never '0 min', which reads as
    nothing to wait for): the one way editkit says how long something will take (`elapsed`: how long it
    took)."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{math.ceil(seconds / 60)} min"


def elapsed(seconds: float) -> str:
    """'22.0 s' below two minutes, else '3.3 min': how long something took (rounding a measured 197 s up to
    '4 min', as an estimate is, would overstate it)."""
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def time_left(seconds: float) -> str:
    """'about 40 s left' / 'about 4 min left': the one way a progress message says how long is left."""
    return "about " + duration(seconds) + LEFT


def eta(elapsed: float, done: float, total: float) -> str:
    """time_left from the rate so far (`done` of `total` in `elapsed` seconds)."""
    if done <= 0 or done >= total:
        return "almost done" if done >= total else "estimating time"
    return time_left(elapsed / done * (total - done))


def gives_time(message: str) -> bool:
    """Whether a progress message already says how long its part has left (time_left / eta)."""
    return LEFT in message or "estimating time" in message


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython's kernel application), where progress bars are on by
    default in the notebook API."""
    import sys

    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001 - any IPython that cannot say is not a kernel we draw into
        return False
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class Bar:
    """A progress callback drawn as a tqdm.auto bar (a widget in Jupyter when ipywidgets is installed, a text
    line otherwise), in percent with the latest message beside it; it appears only once a call has run `delay`
    seconds, so quick calls stay silent. A context manager: the bar is closed on exit."""

    def __init__(self, what: str, delay: float = 2.0) -> None:
        import warnings

        with warnings.catch_warnings():  # without ipywidgets tqdm.auto falls back to text and says so
            warnings.simplefilter("ignore")
            from tqdm.auto import tqdm

        self.bar = tqdm(total=100, desc=what, delay=delay, mininterval=0.5, leave=True,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {elapsed}{postfix}")

    def __call__(self, fraction: float, message: str) -> None:
        target = round(100 * min(max(float(fraction), 0.0), 1.0), 1)
        if message:
            self.bar.set_postfix_str(message[:100], refresh=False)
        self.bar.update(max(target - self.bar.n, 0.0))

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()


# None: on in a Jupyter kernel, off elsewhere (EDITKIT_PROGRESS=0/1 decides first)
_BARS: dict[str, bool | None] = {"on": None}


def set_bars(on: bool | None) -> None:
    """Progress bars for the notebook API's calls: True, False, or None (the default: on in a Jupyter
    kernel)."""
    if on not in (True, False, None):
        raise ValueError("progress bars are on (True), off (False) or automatic (None)")
    _BARS["on"] = on


def bars_on() -> bool:
    import os

    on = _BARS["on"]
    if on is not None:
        return on
    env = os.environ.get("EDITKIT_PROGRESS", "").strip().lower()
    if env in ("0", "off", "false", "no"):
        return False
    return env in ("1", "on", "true", "yes") or in_notebook()


def with_bar(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator for a notebook-API function with a `progress` argument: left out (None), it becomes a Bar
    (`what` is its label) when bars are on; False turns it off for that call; a callback given is used as
    is."""
    import functools
    import inspect

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            given = bound.arguments.get("progress")
            if given is False or (given is None and not bars_on()):
                bound.arguments["progress"] = None
                return fn(*bound.args, **bound.kwargs)
            if given is not None:
                return fn(*bound.args, **bound.kwargs)
            with Bar(what) as bar:
                bound.arguments["progress"] = bar
                return fn(*bound.args, **bound.kwargs)
        return call
    return wrap
