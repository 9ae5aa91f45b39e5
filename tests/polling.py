"""Waiting in tests without fixed sleeps: a fixed sleep is too short on a loaded machine (a flaky test) and time
thrown away on an idle one. `until` polls a condition and returns as soon as it holds, or False at the deadline."""
import time


def until(condition, timeout: float = 10.0, every: float = 0.002) -> bool:
    """True as soon as `condition()` is true; False once `timeout` seconds have passed without it."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True
