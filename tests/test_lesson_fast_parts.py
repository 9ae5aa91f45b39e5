"""The lesson build's shortcuts give the parts the straightforward computation gives: the three traces in one
schedule equal each panel traced alone (1e-5), an edit whose targets and "before" measurement were shared with
other parts equals the edit computed alone (1e-5), and the fact's traces and the re-traces in the engine's fast
mode stay within its error bound of the exact ones (and say they are an approximation); the re-traces take the
first of the fact's noise draws; packs built before a setting existed read as what they computed."""
import pytest

from editkit.lesson import compute
from editkit.lesson.facts import read_facts
from editkit.lesson.pack import Pack
from editkit.model.loading import load_model
from editkit.tracing import Tracer, TraceSpec
from lesson_util import FACT, MODEL, tiny_pack
from test_tracing_fast import FAST_TOLERANCE

EXACT = 1e-5


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    pack = Pack.open(tiny_pack(tmp_path_factory))
    [fid] = pack.fact_ids
    return pack, fid, load_model(MODEL), compute.Settings.from_dict(pack.manifest["settings"])


def _max_diff(a, b) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def test_traces_in_one_schedule_equal_each_panel_alone(built):
    pack, fid, lm, s = built
    stored = pack.part(fid, "trace")["traces"]
    r = read_facts([FACT])[0].request
    with compute.session(lm):
        spec = TraceSpec(r.rewrite, r.subject, " " + r.target_true.strip(), s.samples, s.noise, s.window, s.seed,
                         precision=s.trace_precision)
        tracer = Tracer(lm, spec, cache=False)
        for kind in ("hidden", "mlp", "attn"):
            assert _max_diff(stored[kind]["scores"], tracer.result(kind).scores) <= EXACT, kind


def test_an_edit_with_shared_targets_equals_the_edit_alone(built):
    pack, fid, lm, s = built
    record = compute.with_target(read_facts([FACT])[0].record, FACT["target_new"])
    for method in ("rome", "alphaedit"):  # AlphaEdit's targets are MEMIT's, computed by MEMIT's unit before
        stored = pack.part(fid, f"edit-0-{method}")
        alone, _ = compute.edit(lm, method, record, s)  # no memo, its own "before" measurement
        for key, value in alone["metrics"].items():
            if isinstance(value, float):
                assert stored["metrics"][key] == pytest.approx(value, abs=EXACT), (method, key)


def test_fast_retraces_are_labelled_and_within_the_bound(built):
    pack, fid, lm, s = built
    assert s.retrace_precision == "bfloat16"
    stored = pack.part(fid, "retrace-0-rome")
    assert stored["meta"]["approximation"] is True and stored["meta"]["precision"] == "bfloat16"
    record = compute.with_target(read_facts([FACT])[0].record, FACT["target_new"])
    _, delta = compute.edit(lm, "rome", record, s)
    exact = compute.retrace(lm, record, delta, compute.Settings(**{**s.to_dict(), "retrace_precision": "float32"}))
    assert "approximation" not in exact["meta"]
    assert _max_diff(stored["scores"], exact["scores"]) <= FAST_TOLERANCE


def test_fast_fact_traces_are_labelled_and_within_the_bound(built):
    pack, fid, lm, s = built
    assert s.trace_precision == "bfloat16"
    stored = pack.part(fid, "trace")
    r = read_facts([FACT])[0].request
    exact = compute.traces(lm, r.rewrite, r.subject, r.target_true, s, precision="float32")
    for kind in ("hidden", "mlp", "attn"):
        assert stored["traces"][kind]["meta"]["approximation"] is True, kind
        assert "approximation" not in exact["traces"][kind]["meta"], kind
        assert _max_diff(stored["traces"][kind]["scores"], exact["traces"][kind]["scores"]) <= FAST_TOLERANCE, kind
    for curve in ("none", "mlp", "attn"):  # severing, at the same token
        assert max(abs(a - b) for a, b in zip(stored["severing"][curve], exact["severing"][curve])) <= FAST_TOLERANCE


def test_retraces_take_the_first_of_the_facts_noise_draws(built):
    pack, fid, lm, s = built
    record = compute.with_target(read_facts([FACT])[0].record, FACT["target_new"])
    _, delta = compute.edit(lm, "rome", record, s)
    four = compute.Settings(**{**s.to_dict(), "samples": 4, "retrace_samples": 2})
    two = compute.Settings(**{**s.to_dict(), "samples": 2, "retrace_samples": None})
    a, b = compute.retrace(lm, record, delta, four), compute.retrace(lm, record, delta, two)
    assert a["samples"] == b["samples"] == 2 and a["scores"] == b["scores"]
    more = compute.Settings(**{**s.to_dict(), "samples": 2, "retrace_samples": 5})  # never more than the fact's
    assert compute.retrace(lm, record, delta, more)["scores"] == b["scores"]
    assert compute.retrace(lm, record, delta, compute.Settings(**{**four.to_dict(), "retrace_samples": None})
                           )["samples"] == 4


def test_a_pack_built_before_a_setting_reads_as_what_it_computed():
    old = {"samples": 10, "noise": "3s", "window": 10, "seed": 1}  # written before the precision settings
    s = compute.Settings.from_dict(old)
    assert (s.trace_precision, s.retrace_precision, s.retrace_samples) == ("float32", "float32", None)
    new = compute.Settings.for_new_facts(old)  # facts added to it now: today's defaults for the new fields
    assert new == compute.Settings(**old)
