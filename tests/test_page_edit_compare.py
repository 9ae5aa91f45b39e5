"""The Edit & compare page runs every registered method on a tiny model, shows every view, and survives bad
input; AlphaEdit's spectrum and the lifelong-editing section work."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

from editkit.editing.methods import all_methods
from editkit.editing.requests import EditRequest
from editkit.evaluation.compare import Comparison

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def test_edit_compare_page_runs_three_methods(tmp_path, monkeypatch):
    import streamlit as st

    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))  # no statistics or timings yet: "No estimate yet"
    tables = []  # the keyword arguments of every st.dataframe call, with the table's columns
    real = st.dataframe

    def spy(data=None, *args, **kwargs):
        tables.append((list(getattr(data, "columns", [])), kwargs))
        return real(data, *args, **kwargs)

    monkeypatch.setattr(st, "dataframe", spy)
    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["model_choice"] = "tiny-llama"
    at.switch_page("pages/edit_compare.py").run()
    assert not at.exception
    at.multiselect(key="ec_methods").set_value(["rome", "memit", "pmet"])  # the seed papers' three
    at.text_input(key="ec_subject").set_value("Danielle Darrieux")
    at.number_input(key="ec_gentokens").set_value(8)
    at.button(key="ec_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    out = at.session_state["ec_out"]
    chosen = [m for m in all_methods() if m.name in ("rome", "memit", "pmet")]
    assert set(out.methods) == {m.name for m in chosen}
    table = at.dataframe[0].value  # one column per method (every measure on screen), the first names the measure
    assert list(table.columns) == ["measure", "before edit"] + [m.label for m in chosen]
    assert any(m.value.startswith("**Who did best.** By the summed margin") for m in at.markdown)
    # the estimate above the results is the one after the run (seen in Chromium: "No estimate yet ... timed after
    # the first comparison" above that comparison's results)
    times = [c.value for c in at.caption if c.value.startswith("Time: ")]
    assert len(times) == 1 and times[0].startswith("Time: About "), times
    # every measure's row is on screen: the tables with one column per method (metrics, lifelong runs) are as high
    # as their content (seen in Chromium: the default height hid the metrics' last rows under a scroll bar)
    metrics = [k for cols, k in tables if cols[:1] == ["measure"]]
    assert metrics and all(k.get("height") == "content" for k in metrics), metrics
    assert len(at.get("plotly_chart")) >= 4  # three probability panels and the norms
    # the diagnostics: a cell that does not apply (ROME's division factor for MEMIT and PMET) is "–", explained
    # below the table (it showed "None")
    diag = next(d.value for d in at.dataframe if list(d.value.columns)[:1] == ["method"])
    assert "ROME division factor" in diag.columns and not diag.isna().any().any(), diag
    assert list(diag["ROME division factor"] == "–") == [m.name != "rome" for m in chosen]
    assert any(c.value.startswith("– : does not apply to that method") for c in at.caption)
    at.button(key="ec_trace_go").click().run()
    assert not at.exception and set(at.session_state["ec_traces"]) == {m.name for m in chosen}
    # bad input: a prompt without "{}" -> a clear error box, the earlier results kept on the page
    at.text_input(key="ec_prompt").set_value("The mother tongue of Danielle Darrieux is")
    at.run()
    assert not at.exception
    assert any("{}" in e.value for e in at.error)
    assert at.session_state["ec_out"].methods and at.dataframe


def test_spectrum_and_lifelong_sections():
    at = AppTest.from_file(APP, default_timeout=900)
    at.session_state["model_choice"] = "tiny-gemma3"
    at.switch_page("pages/edit_compare.py").run()
    assert not at.exception
    # the 500-edit file predates UltraEdit and co-edit: named as without a run, not left out silently
    assert any(c.value.startswith("UltraEdit and Co-edit (MEMIT + implied) have no run in this file")
               for c in at.caption), [c.value for c in at.caption]
    at.button(key="ec_spec_go").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    spec = at.session_state["ec_spec"]
    assert [r.layer for r in spec.layers] == [1, 2] and all(r.null_dimension > 0 for r in spec.layers)
    at.multiselect(key="ec_life_methods").set_value(["rome", "alphaedit"])
    at.number_input(key="ec_life_n").set_value(4)
    at.number_input(key="ec_life_batch").set_value(2)
    at.button(key="ec_life_go").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    life = at.session_state["ec_life"]
    assert set(life) == {"rome", "alphaedit"} and life["rome"].batch == 1 and life["alphaedit"].batch == 2
    assert [r["edit"] for r in life["alphaedit"].rows] == [2, 4]


def test_the_request_survives_a_visit_to_another_page():
    """Back from another page, the form shows the user's own request (not the default example) above its results,
    and its own paraphrases (the default example's never mix into it); a request changed after a run says the
    results are the last run's."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-llama"
    at.switch_page("pages/edit_compare.py").run()
    at.text_input(key="ec_prompt").set_value("{} was born in the city of")
    at.text_input(key="ec_subject").set_value("Jean Gabin")
    at.text_area(key="ec_para").set_value("Jean Gabin's birthplace is")
    at.run()
    at.switch_page("pages/attention_vs_ffn.py").run()  # another page (Home is app.py's function)
    at.switch_page("pages/edit_compare.py").run()
    assert not at.exception
    assert at.text_input(key="ec_prompt").value == "{} was born in the city of"
    assert at.text_input(key="ec_subject").value == "Jean Gabin"
    assert at.text_area(key="ec_para").value == "Jean Gabin's birthplace is"
    at.session_state["ec_out"] = Comparison([EditRequest("{} is", "X", " Y")], [], {})
    at.run()
    assert any("not for the request above" in c.value for c in at.caption)


def test_hyperparameter_boxes_belong_to_their_model():
    """The JSON boxes hold one model's hyperparameters: after a switch to another model they show that model's
    defaults (Gemma's ROME layer 4 stayed in the box and every edit on a 4-layer model failed "out of range"), and
    the user's own text comes back with its model."""
    import json

    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/edit_compare.py").run()
    mine = {**json.loads(at.text_area(key="ec_hp_rome@tiny-gpt2").value), "layers": [3]}
    at.text_area(key="ec_hp_rome@tiny-gpt2").set_value(json.dumps(mine)).run()
    at.selectbox(key="model_choice").set_value("tiny-llama").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert json.loads(at.text_area(key="ec_hp_rome@tiny-llama").value)["layers"] == [1]  # tiny-llama's defaults
    at.selectbox(key="model_choice").set_value("tiny-gpt2").run()
    assert json.loads(at.text_area(key="ec_hp_rome@tiny-gpt2").value)["layers"] == [3]  # the user's, kept


def test_ripple_section_draws_the_implied_facts_or_says_there_are_none():
    """Native language English implies speaking English (a rule that needs no knowledge): one row per method; with
    the relation unknown nothing can be derived, and the view says so in words, never an empty chart."""
    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["model_choice"] = "tiny-gemma3"
    at.switch_page("pages/edit_compare.py").run()
    assert not at.exception
    at.multiselect(key="ec_methods").set_value(["rome"])
    assert at.selectbox(key="ec_ripple_rel").value == "P103"  # read from the request's template
    at.button(key="ec_ripple_go").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    out = at.session_state["ec_ripple"]
    assert [f.rule for f in out.facts] == ["P103>P1412"] and [m.name for m in out.methods] == ["rome", "in-context"]
    assert at.get("plotly_chart") and any("propagat" in m.value or "score the same" in m.value for m in at.markdown)
    at.selectbox(key="ec_ripple_rel").select_index(0)  # "none: derive nothing"
    at.button(key="ec_ripple_go").click().run()
    assert not at.exception
    assert at.session_state["ec_ripple"].facts == []
    assert any("no implied fact the model knows" in i.value for i in at.info)


def test_prompts_of_another_subject_are_pointed_out():
    """The second walk: a request of one's own about the Brandenburg Gate kept the example's generation prompt
    "Danielle Darrieux's mother tongue is", and the generations compared nothing of the edit."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/edit_compare.py").run()
    assert not any("do not mention the subject" in w.value for w in at.warning)  # the example is consistent
    at.text_input(key="ec_subject").set_value("Brandenburg Gate")
    at.text_input(key="ec_prompt").set_value("{} is located in the country of")
    at.text_area(key="ec_para").set_value("The Brandenburg Gate stands in the country of").run()
    said = [w.value for w in at.warning if "do not mention the subject" in w.value]
    assert said and said[0].startswith("1 paraphrase or generation prompt(s) do not mention the subject "
                                       "'Brandenburg Gate'") and "Danielle Darrieux's mother tongue is" in said[0]


def test_neighbours_the_unedited_model_already_gets_wrong_are_pointed_out():
    """The second walk: the Taj Mahal moved from Agra to Mumbai with 'The Gateway of India is located in the
    city of' as a neighbour (in Mumbai): specificity was 0 before any edit, and nothing said why."""
    from types import SimpleNamespace

    from pages.edit_compare import unfit_neighbours

    req = EditRequest("{} is located in the city of", "The Taj Mahal", " Mumbai", " Agra")
    rows = [{"prompt": "The Red Fort is located in the city of", "p_new": 0.01, "p_true": 0.3},
            {"prompt": "The Gateway of India is located in the city of", "p_new": 0.6, "p_true": 0.01}]
    out = SimpleNamespace(requests=[req], pre=[{"probabilities": {"neighborhood": rows}}])
    said = unfit_neighbours(out)
    assert said.startswith("1 of 2 neighbour prompt(s) of 'The Taj Mahal' already prefer 'Mumbai' to 'Agra'")
    assert "Gateway of India" in said and "Red Fort" not in said
    rows[1]["p_new"] = 0.001
    assert unfit_neighbours(out) == ""
    no_true = SimpleNamespace(requests=[EditRequest("{} is in", "X", " Y")], pre=out.pre)
    assert unfit_neighbours(no_true) == ""


def test_the_ripple_relation_follows_the_request():
    """The second walk: the Taj Mahal 'is located in the city of' was tested as P103 'native language', the
    relation guessed for the example request the page opened with (a keyed selectbox keeps its value)."""
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/edit_compare.py").run()
    assert at.selectbox(key="ec_ripple_rel").value == "P103"
    at.text_input(key="ec_prompt").set_value("{} is located in the city of").run()
    assert not at.exception and at.selectbox(key="ec_ripple_rel").value == "P276"
    at.selectbox(key="ec_ripple_rel").select_index(0).run()  # a choice of one's own stays ...
    at.text_input(key="ec_new").set_value("Rome").run()
    assert at.selectbox(key="ec_ripple_rel").value is None
    at.text_input(key="ec_prompt").set_value("The mother tongue of {} is").run()  # ... until the guess moves
    assert at.selectbox(key="ec_ripple_rel").value == "P103"
