"""The side-effect views: bleed map and sweep on Edit & compare, the layer sweep beside the trace."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def test_bleed_map_and_sweep_sections(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=900)
    at.session_state["model_choice"] = "tiny-llama"
    at.switch_page("pages/edit_compare.py").run()
    assert not at.exception
    at.selectbox(key="ec_bleed_method").set_value("rome")
    at.number_input(key="ec_bleed_facts").set_value(3)
    at.button(key="ec_bleed_go").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    out = at.session_state["ec_bleed"]
    assert out.check["max_error"] < 1e-4 and any(r.source == "known fact" for r in out.rows)
    charts = len(at.get("plotly_chart"))
    assert charts >= 1
    at.selectbox(key="ec_sweep_method").set_value("rome")
    at.number_input(key="ec_sweep_n").set_value(2)
    at.text_area(key="ec_sweep_params").set_value("v_num_grad_steps=2\nmom2_shrinkage=0,0.5")
    at.button(key="ec_sweep_go").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    sweep = at.session_state["ec_sweep"]
    assert [r["label"] for r in sweep.settings] == ["v_num_grad_steps=2, mom2_shrinkage=0",
                                                       "v_num_grad_steps=2, mom2_shrinkage=0.5"]
    assert len(at.get("plotly_chart")) == charts + 1
    # a bad grid: a clear error, the earlier sweep kept
    at.text_area(key="ec_sweep_params").set_value("mom2_shrinkage=5")
    at.button(key="ec_sweep_go").click().run()
    assert not at.exception and any("out of range" in e.value for e in at.error)
    assert at.session_state["ec_sweep"] == sweep


def test_layer_sweep_beside_the_trace(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=900)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/causal_tracing.py").run()
    at.number_input(key="trace_samples").set_value(2)
    at.button[0].click().run()  # the trace first
    assert not at.exception and not at.error
    traced = len(at.get("plotly_chart"))
    at.multiselect(key="ls_layers").set_value([0, 1])
    at.text_input(key="ls_new").set_value("Paris")
    at.button(key="ls_go").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    out = at.session_state["ls_out"]
    assert [r.layer for r in out.rows] == [0, 1]
    assert out.trace.kind == "mlp"  # reused from the trace above (same prompt and answer)
    assert len(at.get("plotly_chart")) == traced + 1
