"""The Edit & compare page's hyperparameter sweep starts from the settings in the method's hyperparameter box: a
value the user typed there reaches every setting of the sweep (the grid's own values on top), never silently
replaced by the model's defaults."""
import json
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def _fake_out(method: str):
    from editkit.evaluation.sweep import Sweep

    cell = {"mean": 50.0, "ci95": 1.0}
    keys = ("efficacy", "generalization", "specificity", "gen_efficacy")
    row = {"label": "mom2_shrinkage=0.5", "pareto": True, "score": 50.0, "cached": False, **{k: cell for k in keys}}
    return Sweep("tiny-gpt2", method, "counterfact-val", 1, 1, {}, [row], [0], {k: cell for k in keys},
                 {k: [0] for k in keys}, 1, None, {}, {})


def test_sweep_uses_the_hyperparameter_box(monkeypatch):
    import editkit.evaluation.sweep as library

    calls = []

    def fake_sweep(*args, **kwargs):
        calls.append((args, kwargs))
        return _fake_out("rome")

    monkeypatch.setattr(library, "sweep", fake_sweep)
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/edit_compare.py").run()
    assert not at.exception
    box = json.loads(at.text_area(key="ec_hp_rome@tiny-gpt2").value)
    box["v_weight_decay"] = 0.25  # the user's own setting, not the model's default
    at.text_area(key="ec_hp_rome@tiny-gpt2").set_value(json.dumps(box))
    at.selectbox(key="ec_sweep_method").set_value("rome")
    at.text_area(key="ec_sweep_params").set_value("mom2_shrinkage=0.5")
    at.button(key="ec_sweep_go").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert len(calls) == 1
    args, kwargs = calls[0]
    assert kwargs.get("hparams", {}).get("v_weight_decay") == 0.25
    assert at.session_state["ec_sweep"].settings[0]["label"] == "mom2_shrinkage=0.5"

    # a broken box blocks the sweep with a message; the library is not called
    at.text_area(key="ec_hp_rome@tiny-gpt2").set_value("{not json")
    at.button(key="ec_sweep_go").click().run()
    assert not at.exception and any("hyperparameters" in e.value for e in at.error)
    assert len(calls) == 1
