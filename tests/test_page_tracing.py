"""The causal tracing page runs headless on a tiny model and keeps its results."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from editkit.tracing.aie import average_indirect_effect

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def test_tracing_page_traces_and_survives_bad_input():
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/causal_tracing.py").run()
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


@pytest.mark.parametrize("bf16, off", [(0.5, True), (200.0, False)])
def test_the_fast_mode_box_is_off_where_bf16_is_the_slow_path(monkeypatch, bf16, off):
    """On a CPU without bf16 matmuls the fast mode would be the slow one (model/hardware.py): its box is disabled
    and a caption says why, with the measured rates."""
    import torch

    from editkit.model import hardware

    monkeypatch.delenv(hardware.FORCE, raising=False)
    monkeypatch.setitem(hardware._RATES, f"cpu:{torch.float32}", 50.0)
    monkeypatch.setitem(hardware._RATES, f"cpu:{torch.bfloat16}", bf16)
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/causal_tracing.py").run()
    assert not at.exception
    assert at.checkbox(key="trace_fast").disabled == off
    said = " ".join(c.value for c in at.caption)
    assert ("Fast mode is off on this machine" in said and "0.5 GMAC/s on cpu, 0.01x float32's 50.0" in said) == off


def test_tracing_page_preview_then_exact_and_a_cancelled_trace_keeps_its_panels(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/causal_tracing.py").run()
    at.number_input(key="trace_samples").set_value(2)
    at.button[0].click().run()
    state = at.session_state["trace_state"]
    assert set(state["preview"]) == set(state["exact"]) == {"hidden", "mlp", "attn"}  # the preview came first
    assert all(r.estimate for r in state["preview"].values())
    assert not any(r.estimate for r in state["exact"].values())
    assert len(at.get("plotly_chart")) == 4  # each preview was replaced by its exact panel
    # A trace cancelled after its preview and the hidden panel (the Cancel button's callback sets the flag and
    # Streamlit stops the run): the next run shows what was computed, the estimates marked as such.
    at.session_state["trace_state"] = {"exact": {"hidden": state["exact"]["hidden"]}, "preview": state["preview"],
                                       "sever": None}
    at.session_state["trace_cancelled"] = True
    at.run()
    assert not at.exception and any("cancelled" in w.value for w in at.warning)
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert len(titles) == 3 and sum("ESTIMATE" in t for t in titles) == 2
    at.button[0].click().run()  # tracing again works: everything comes from the cache now
    assert not at.exception and len(at.get("plotly_chart")) == 4
    assert not any("cancelled" in w.value for w in at.warning)


def test_tracing_page_shows_the_shipped_aie_runs_without_computing(tiny_by_name, tmp_path, monkeypatch):
    """A model with a shipped AIE run shows it at a click (nothing traced); with two runs, the toggle draws them
    side by side on a relative depth axis."""
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    fake = [{"known_id": 0, "prompt": "The Eiffel Tower is in", "subject": "Eiffel Tower"}]
    monkeypatch.setattr("editkit.tracing.aie.predicted_facts", lambda lm: fake)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for name in ("tiny-gpt2", "tiny-llama"):
        run = average_indirect_effect(tiny_by_name(name), n_facts=1, samples=2, window=2)
        run.save(shipped / f"aie-{name}.json")
    monkeypatch.setattr("editkit.tracing.aie.SHIPPED_DIR", shipped)
    monkeypatch.setattr("editkit.tracing.tracer.TraceSetup.build",
                        lambda *a, **k: pytest.fail("traced instead of showing the shipped run"))
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/causal_tracing.py").run()
    assert not at.exception and not at.get("plotly_chart")
    at.button(key="trace_aie_shipped").click().run()
    assert not at.exception and len(at.get("plotly_chart")) == 3
    assert any("shipped run (the manual's Results: Tracing): 1 facts" in c.value for c in at.caption)
    at.toggle(key="trace_aie_depth").set_value(True).run()
    assert not at.exception and len(at.get("plotly_chart")) == 5


def test_the_trace_form_survives_a_visit_to_another_page():
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/causal_tracing.py").run()
    at.text_input(key="trace_prompt").set_value("The Colosseum is in the city of")
    at.text_input(key="trace_subject").set_value("Colosseum")
    at.number_input(key="trace_samples").set_value(2)
    at.button[0].click().run()
    assert not at.exception and not at.error
    at.switch_page("pages/attention_vs_ffn.py").run()  # another page (Home is app.py's function)
    at.switch_page("pages/causal_tracing.py").run()
    assert at.text_input(key="trace_prompt").value == "The Colosseum is in the city of"
    assert at.text_input(key="trace_subject").value == "Colosseum" and at.number_input(key="trace_samples").value == 2
    assert len(at.get("plotly_chart")) == 4 and not any("last trace that finished" in c.value for c in at.caption)


def test_layers_of_another_model_give_way_to_every_layer_of_this_one():
    """"Layers to edit" kept from a deeper model (SmolLM2's 25 and 29 on Gemma's 18 layers) came back empty, the
    button disabled; it now shows every layer of the model picked."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.session_state["ls_layers"] = [25, 29]
    at.switch_page("pages/causal_tracing.py").run()
    assert not at.exception
    assert at.multiselect(key="ls_layers").value == [0, 1, 2, 3]


def test_edit_every_layer_waits_for_a_subject_that_is_in_the_prompt():
    """Issue 60.3: after a trace refused for its subject, "Edit every layer" stayed enabled and said "Something went
    wrong in layer sweep: NameError: name 'EditkitError' is not defined". The button is disabled, and says why,
    until the trace form's subject is in its prompt."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/causal_tracing.py").run()
    assert not at.button(key="ls_go").disabled
    at.text_input(key="trace_subject").set_value("Tokyo")
    at.button[0].click().run()  # the form's Trace button: refused
    assert not at.exception and any("does not occur" in e.value for e in at.error)
    assert at.button(key="ls_go").disabled
    assert any("'Tokyo' is not in the prompt" in c.value for c in at.caption)


def test_a_refused_noise_text_is_said_once():
    """The second walk: a bad noise text gave two red boxes, the trace's and the two-model section's; the section
    now says in a caption why it cannot trace."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/causal_tracing.py").run()
    at.text_input(key="trace_noise").set_value("three sigma")
    at.button[0].click().run()
    assert [e.value for e in at.error if "noise" in e.value] == \
        ["tracing: noise must be a number (absolute) or a multiple of sigma like '3s', not 'three sigma'"]
    assert any(c.value.startswith("The trace form above cannot be traced: noise must") for c in at.caption)
