"""The sidebar's model and dtype pickers: the memory estimate shows before a model loads, a half-precision model
loads and says so in the model card, SmolLM2 is offered, and a model that does not fit is refused with the numbers
(no model card, no traceback)."""
from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

import editkit.model.footprint as footprint

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


def test_a_model_that_does_not_fit_is_refused(monkeypatch):
    st.cache_data.clear()
    monkeypatch.setattr(footprint, "available", lambda device: (1_000, "RAM"))
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["model_choice"] = "tiny-llama"
    at.run()
    assert not at.exception
    assert any("does not fit" in e.value and "of RAM is free" in e.value for e in at.error)
    assert not at.metric  # nothing loaded, no model card
    st.cache_data.clear()
