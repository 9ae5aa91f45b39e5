"""Load test, small form (tests/load_util.py has the scenario and the full form): 3 concurrent browser sessions of
the real app on the embedded model, a predictor, a tracer and an editor running at once. No error box, no leak
(every prediction and trace of the base facts reads exactly as the base model's; the editor sees its own edit),
the server holds one copy of the weights, and the whole run stays under 3 minutes.

Needs Debian's chromium, like the browser tests; deselect with -m "not load".
"""
import os
import threading

import pytest

from browser_util import chromium_path

pytestmark = [pytest.mark.browser, pytest.mark.load]
pytest.importorskip("playwright.async_api")


def test_three_sessions_at_once_see_only_their_own_edits():
    if chromium_path() is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium on the CI machine")
        pytest.skip("no chromium installed (apt-get install -y chromium)")
    from load_util import run

    out = _in_own_thread(run, 3, timeout_s=240, limits={"jobs": 3}, cancel=False)
    print(out)
    assert out["errors"] == 0, out["error_list"]
    assert out["leaks"] == 0, out["leak_list"]
    assert out["checks_passed"] >= 4 and out["predictions"] >= 1
    assert out["one_copy_of_the_weights"], out
    assert out["wall_s"] < 180, out


def _in_own_thread(fn, *args, **kwargs):
    """fn(*args, **kwargs) in a new thread: the browser tests' sync Playwright keeps an event loop running in this
    process's main thread (pytest runs both files in one process), and the driver's asyncio.run needs a thread
    without one."""
    out, err = [], []

    def target():
        try:
            out.append(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            err.append(exc)

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if err:
        raise err[0]
    return out[0]
