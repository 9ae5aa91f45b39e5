"""Load test of the Lesson page by Streamlit websocket clients (benchmarks/load/lesson_load.py `--client ws`):
five students walk steps 1-10 (not step 11) of the shipped pack at once without a browser, so what is measured
is the server alone. Every step's heading and revealed result must arrive with no error element; the latencies
are printed, not asserted (the benchmark reports them for 30 students)."""
import pytest

from test_load import _in_own_thread

pytestmark = pytest.mark.load


@pytest.mark.parametrize("think_s", [0.0, 0.5])
def test_five_websocket_students_walk_the_lesson(think_s):
    """The same walk by Streamlit websocket clients (no browser: the server's own cost), clicking at once and after
    reading; every step's heading and revealed result arrive, no error element."""
    from load_util import driver

    out = _in_own_thread(driver("lesson_load").run, 5, timeout_s=120, client="ws", think_s=think_s)
    print(out)
    assert out["errors"] == 0, out["error_list"]
    assert out["steps_walked"] == 5 * 10, out
