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
    from editkit.editing import run as api
    from editkit.evaluation import compare

    monkeypatch.setattr(api, "first_use", lambda *a, **k: {})
    lm = tiny_by_name("tiny-gpt2")
    compare._remember(lm, "rome", 3.0)  # one record's edit and its measuring
    compare._remember(lm, compare.MEASURE, 1.0)  # one record measured on the unedited model
    idle, _ = compare.estimate(lm, ["rome"], 2)
    monkeypatch.setattr(speed, "_LAST", {})
    rates["rate"] = 25.0
    busy, text = compare.estimate(lm, ["rome"], 2)
    assert idle == pytest.approx(8.0) and busy == pytest.approx(32.0)
    assert "measuring the unedited model" in text and "4.0x slower than at its best" in text


def test_a_comparison_records_the_time_of_its_edits_with_their_measuring(rates, monkeypatch, tiny_by_name):
    """The edit alone was a third of a run (3 min of 10): the time recorded is each method's edit and the measuring
    after it, and the unedited model's measuring."""
    from editkit.evaluation import compare, load_eval_set

    lm = tiny_by_name("tiny-gpt2")
    compare.compare_methods(lm, ["rome"], load_eval_set("counterfact", 1), n_gen=1, gen_tokens=5)
    timed = compare.TIMINGS.get(compare.TIMINGS.path(lm.name))
    assert set(timed) == {"rome", compare.MEASURE} and timed["rome"]["rate"] == 100.0
    assert timed["rome"]["seconds"] > 0 and timed[compare.MEASURE]["seconds"] > 0
