"""The fast mode runs in bf16 only where this machine multiplies bf16 matrices faster than float32 ones
(model/hardware.py): measured, or as EDITKIT_FAST_BF16 says. Where it is off, a trace asked for in fast mode is
the exact engine's, says so, and is not labelled an approximation; a half-precision load says what it costs."""
import pytest
import torch

from editkit.core.errors import EditkitError
from editkit.lesson import compute
from editkit.model import hardware
from editkit.model.loading import load_model
from editkit.tracing.bench import fast_mode_error
from editkit.tracing.spec import effective_precision

MODEL = "tiny-llama"


@pytest.fixture
def rates(monkeypatch):
    """Set this process's measured rates (GMAC/s): rates(float32=50, bfloat16=200)."""
    monkeypatch.delenv(hardware.FORCE, raising=False)

    def put(float32: float, bfloat16: float, float16: float | None = None):
        for dtype, value in ((torch.float32, float32), (torch.bfloat16, bfloat16), (torch.float16, float16)):
            if value is not None:
                monkeypatch.setitem(hardware._RATES, f"cpu:{dtype}", value)
    return put


def test_the_probe_measures_both_rates():
    r = hardware.matmul_rates("cpu")
    assert r.float32 > 0 and r.bfloat16 > 0
    assert r.fast_bf16 == (r.bfloat16 / r.float32 >= hardware.FAST_RATIO)
    assert "GMAC/s" in r.describe()
    assert hardware.matmul_rates("cpu") == r  # measured once per process


@pytest.mark.parametrize("bf16, expected", [(200.0, "bfloat16"), (0.5, "float32"), (55.0, "float32")])
def test_the_fast_mode_follows_the_measured_rates(rates, bf16, expected):
    rates(float32=50.0, bfloat16=bf16)
    assert hardware.fast_precision("cpu") == expected
    assert effective_precision("bfloat16", "cpu") == expected
    assert effective_precision("float32", "cpu") == "float32"  # the exact engine is never replaced
    note = hardware.slow_bf16_note("cpu")
    assert (note is None) == (expected == "bfloat16")
    if note:
        assert "exact" in note and f"{bf16:.1f} GMAC/s" in note


def test_the_operator_decides_over_the_measurement(rates, monkeypatch):
    rates(float32=50.0, bfloat16=0.5)
    monkeypatch.setenv(hardware.FORCE, "on")
    assert hardware.fast_precision("cpu") == "bfloat16" and hardware.slow_bf16_note("cpu") is None
    rates(float32=50.0, bfloat16=200.0)
    monkeypatch.setenv(hardware.FORCE, "off")
    assert hardware.fast_precision("cpu") == "float32"
    assert "EDITKIT_FAST_BF16=off" in hardware.slow_bf16_note("cpu")
    monkeypatch.setenv(hardware.FORCE, "maybe")
    with pytest.raises(EditkitError, match="EDITKIT_FAST_BF16 must be 'on' or 'off'"):
        hardware.fast_precision("cpu")


def test_a_lesson_trace_asked_fast_is_exact_where_bf16_is_slow(rates):
    lm = load_model(MODEL)
    s = compute.Settings()
    assert s.trace_precision == "bfloat16"
    prompt, subject = "The Eiffel Tower is located in the city of", "Eiffel Tower"
    rates(float32=50.0, bfloat16=0.5)
    slow = compute.traces(lm, prompt, subject, None, s, kinds=("hidden",), sever=False)["traces"]["hidden"]
    exact = compute.traces(lm, prompt, subject, None, s, kinds=("hidden",), sever=False,
                           precision="float32")["traces"]["hidden"]
    assert slow["meta"].get("precision", "float32") == "float32" and "approximation" not in slow["meta"]
    assert slow["scores"] == exact["scores"]
    rates(float32=50.0, bfloat16=200.0)
    fast = compute.traces(lm, prompt, subject, None, s, kinds=("hidden",), sever=False)["traces"]["hidden"]
    assert fast["meta"]["precision"] == "bfloat16" and fast["meta"]["approximation"] is True


def test_measuring_the_fast_modes_error_is_refused_where_it_is_off(rates):
    rates(float32=50.0, bfloat16=0.5)
    with pytest.raises(EditkitError, match="fast mode is off on this machine"):
        fast_mode_error(load_model(MODEL), n_facts=1)


def test_a_half_precision_load_says_what_it_costs_where_it_is_slower(rates):
    rates(float32=50.0, bfloat16=0.5)
    said = []
    load_model(MODEL, dtype="bfloat16", progress=lambda f, m: said.append(m))
    assert any("bfloat16 weights are slow on this machine" in m and "float32 is faster here" in m for m in said), said
    rates(float32=50.0, bfloat16=200.0)
    said.clear()
    load_model(MODEL, dtype="bfloat16", progress=lambda f, m: said.append(m))
    assert not any("weights are slow on this machine" in m for m in said)
    assert hardware.slow_dtype_note(torch.float32) is None
