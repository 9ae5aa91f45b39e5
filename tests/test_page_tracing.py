"""The causal tracing page runs headless on a tiny model and keeps its results."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def test_tracing_page_traces_and_survives_bad_input():
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("app_pages/causal_tracing.py").run()
    assert not at.exception
    at.number_input(key="trace_samples").set_value(2)
    at.button[0].click().run()  # the form's Trace button
    assert not at.exception and not at.error
    assert len(at.get("plotly_chart")) == 4  # three heatmaps and the severing chart
    at.text_input(key="trace_subject").set_value("Tokyo")
    at.button[0].click().run()
    assert not at.exception
    assert any("does not occur" in e.value for e in at.error)
    assert len(at.get("plotly_chart")) == 4  # earlier results kept
