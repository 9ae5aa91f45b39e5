"""The Edit & compare page runs all three methods on a tiny model, shows every view, and survives bad input."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def test_edit_compare_page_runs_three_methods():
    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["model_choice"] = "tiny-llama"
    at.switch_page("app_pages/edit_compare.py").run()
    assert not at.exception
    at.text_input(key="ec_subject").set_value("Danielle Darrieux")
    at.number_input(key="ec_gentokens").set_value(8)
    at.button(key="ec_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    out = at.session_state["ec_out"]
    assert set(out["methods"]) == {"rome", "memit", "pmet"}
    table = at.dataframe[0].value
    assert list(table["method"]) == ["before edit", "ROME", "MEMIT", "PMET"]
    assert len(at.get("plotly_chart")) >= 4  # three probability panels and the norms
    at.button(key="ec_trace_go").click().run()
    assert not at.exception and set(at.session_state["ec_traces"]) == {"rome", "memit", "pmet"}
    # bad input: a prompt without "{}" -> a clear error box, the earlier results kept on the page
    at.text_input(key="ec_prompt").set_value("The mother tongue of Danielle Darrieux is")
    at.run()
    assert not at.exception
    assert any("{}" in e.value for e in at.error)
    assert at.session_state["ec_out"]["methods"] and at.dataframe


def test_edit_compare_sequential_stress():
    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("app_pages/edit_compare.py").run()
    at.selectbox(key="ec_seq_method").set_value("rome")
    at.number_input(key="ec_seq_n").set_value(2)
    at.button(key="ec_seq_go").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert [r["edit"] for r in at.session_state["ec_seq"]["rows"]] == [1, 2]
