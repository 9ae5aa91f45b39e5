"""The sidebar's model and dtype pickers: the memory estimate shows before a model loads, a half-precision model
loads and says so in the model card, SmolLM2 is offered, and a model that does not fit is refused with the numbers
(no model card, no traceback); half precision says where it is the slow path."""
from pathlib import Path

import pytest
import streamlit as st
import torch
from streamlit.testing.v1 import AppTest

import editkit.model.ram as ram
from editkit.model import hardware

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def _captions(at) -> str:
    return " ".join(c.value for c in at.sidebar.caption) + " ".join(c.value for c in at.caption)


def test_dtype_picker_loads_half_precision_with_an_estimate():
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.session_state["model_dtype"] = "bfloat16"
    at.run()
    assert not at.exception and not at.error
    assert any(o.startswith("smollm2-135m") for o in at.selectbox(key="model_choice").options)
    assert at.selectbox(key="model_dtype").options == ["float32", "bfloat16", "float16"]
    text = _captions(at)
    assert "Memory:" in text and "x 2 bytes (bfloat16)" in text
    assert "tiny-gpt2@bfloat16" in text and "· bfloat16" in text  # the model card's caption


@pytest.mark.parametrize("bf16, warned", [(0.5, True), (200.0, False)])
def test_half_precision_says_where_it_is_the_slow_path(monkeypatch, bf16, warned):
    """bfloat16 halves the memory; on a CPU without bf16 matmuls it is also many times slower (model/hardware.py)."""
    monkeypatch.delenv(hardware.FORCE, raising=False)
    monkeypatch.setitem(hardware._RATES, f"cpu:{torch.float32}", 50.0)
    monkeypatch.setitem(hardware._RATES, f"cpu:{torch.bfloat16}", bf16)
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.session_state["model_dtype"] = "bfloat16"
    at.run()
    assert not at.exception
    said = " ".join(w.value for w in at.sidebar.warning)
    assert ("bfloat16 matmuls run at 0.5 GMAC/s, 0.01x float32's 50.0" in said) == warned, said


def test_a_model_that_does_not_fit_is_refused(monkeypatch):
    st.cache_data.clear()
    monkeypatch.setattr(ram, "available", lambda device: (1_000, "RAM"))
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["model_choice"] = "tiny-llama"
    at.run()
    assert not at.exception
    assert any("does not fit" in e.value and "of RAM is free" in e.value for e in at.error)
    assert not at.metric  # nothing loaded, no model card
    st.cache_data.clear()
