"""Estimates said at this machine's speed now (editkit/runtime/speed.py): Edit & compare estimated "About 3 min"
from an idle machine's timings and took 571 s while other work shared the cores (issue 60.6)."""
import pytest

from editkit.runtime import speed


@pytest.fixture
def rates(monkeypatch, tmp_path):
    """A machine whose probe reads what the test sets (GFLOP/s), with its own cache."""
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    now = {"rate": 100.0, "probes": 0}

    def probe():
        now["probes"] += 1
        return now["rate"]

    monkeypatch.setattr(speed, "_probe", probe)
    monkeypatch.setattr(speed, "_LAST", {})
    return now


def test_a_duration_is_scaled_by_the_rate_then_over_the_rate_now(rates, monkeypatch):
    assert speed.rate() == 100.0 and speed.fastest() == 100.0
    monkeypatch.setattr(speed, "_LAST", {})
    rates["rate"] = 25.0
    assert speed.now(10.0, then=50.0) == pytest.approx(20.0)
    assert speed.now(10.0) == pytest.approx(40.0)  # no rate recorded: as measured at the fastest seen
    assert speed.slowdown() == pytest.approx(4.0)


def test_the_probe_runs_at_most_once_a_while(rates):
    speed.rate()
    speed.rate()
    assert rates["probes"] == 1


def test_the_probe_measures_something():
    assert speed._probe() > 0.01


def test_an_edit_estimate_grows_with_the_load(rates, monkeypatch, tiny_by_name):
    """A comparison's edit time recorded at 100 GFLOP/s is said 4x longer at 25 (no first-use statistics to
    count here: only the edits)."""
    from editkit.editing import api
    from editkit.evaluation import compare

    monkeypatch.setattr(api, "first_use", lambda *a, **k: {})
    lm = tiny_by_name("tiny-gpt2")
    compare._remember(lm, "rome", 3.0)
    idle, _ = compare.estimate(lm, ["rome"], 2)
    monkeypatch.setattr(speed, "_LAST", {})
    rates["rate"] = 25.0
    busy, text = compare.estimate(lm, ["rome"], 2)
    assert idle == pytest.approx(6.0) and busy == pytest.approx(24.0)
    assert "4.0x slower than at its best" in text
