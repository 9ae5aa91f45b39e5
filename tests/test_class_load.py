"""A class on the expert pages, small form (benchmarks/load/class_load.py has the scenario and the full form):
six websocket students of the served app on the embedded model, two of them also running a trace and an edit
with one job slot, so that a job waits. No error, no leak (each prediction reads as the base model's, an
editor sees its own edit), every job finishes and the one that waited showed its place, and the server's peak
memory stays under its memory after the model loaded plus the jobs' budget. Latency is reported, not asserted
(the full form on an idle machine measures the goal)."""
import pytest

pytestmark = pytest.mark.load
pytest.importorskip("websockets")


def test_six_students_with_two_jobs_each():
    from load_util import driver

    out = driver("class_load").run(students=6, own=2, think=1.0, rounds=1, budget="3 GB", jobs=1, timeout=600)
    print(out)
    assert out["errors"] == 0, out["error_list"]
    assert out["leaks"] == 0, out["leak_list"]
    assert out["jobs"] == 4 and out["jobs_finished"] == 4, out
    assert out["jobs_waited_showing_place"] >= 1, out
    assert out["checks_passed"] >= 12, out
    assert out["peak_under_base_plus_budget"], out
