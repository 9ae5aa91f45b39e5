"""A method is one file plus one hyperparameter file: a toy method registered here (with its JSON defaults in a
folder of its own) appears in the CLI, the evaluation and the Edit & compare page through the registry alone."""
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from editkit.cli import main
from editkit.editing.api import run_edit
from editkit.editing.defaults import load_hparams
from editkit.editing.hparams import Hparams
from editkit.editing.methods import Method, names, register, unregister
from editkit.editing.result import EditResult, norm_report
from editkit.errors import EditkitError
from editkit.evaluation import EvalSpec, evaluate

APP = str(Path(__file__).resolve().parent.parent / "app.py")
REQUEST = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English",
           "target_true": "French", "neighborhood_prompts": ["The mother tongue of Jean Gabin is"]}


@dataclass(frozen=True)
class ToyHparams(Hparams):
    scale: float = 0.0  # the toy update: scale times an all-ones matrix


def apply_toy(lm, requests, hp, progress=None, debug=None, reference=False):
    layer = hp.layers[0]
    dW = torch.full_like(lm.adapter.down_weight(layer), hp.scale)
    delta = lm.adapter.weight_delta("down_proj", layer, dW)
    info = {"requests": [{"case_id": r.case_id, "losses": []} for r in requests], "hparams": hp.to_dict(),
            "norms": norm_report(lm.model, delta)}
    return EditResult("toy", list(requests), delta, info, 0.01)


@pytest.fixture
def toy(tmp_path):
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "tiny.json").write_text(json.dumps({"layers": [1], "scale": 0.01, "source": "test"}))
    register(Method("toy", "Toy", apply_toy, ToyHparams, "one layer, all ones", hparams_dir=folder))
    yield
    unregister("toy")


def test_toy_method_runs_through_the_api(toy, tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    assert "toy" in names()
    hp = load_hparams("toy", lm)
    assert isinstance(hp, ToyHparams) and hp.scale == 0.01 and hp.layers == (1,)
    result = run_edit(lm, "toy", REQUEST)
    assert set(result.delta) == {lm.adapter.param_name("down_proj", 1)}
    with pytest.raises(EditkitError, match="unknown hyperparameter 'wobble'"):
        load_hparams("toy", lm, {"wobble": 1})


def test_toy_method_in_the_cli(toy, tmp_path, capsys):
    req = tmp_path / "req.json"
    req.write_text(json.dumps([REQUEST]))
    assert main(["edit", "--model", "tiny-llama", "--method", "toy", "--requests", str(req), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "toy" and out["hparams"]["scale"] == 0.01
    with pytest.raises(SystemExit):  # an unregistered name is not a choice
        main(["edit", "--model", "tiny-llama", "--method", "nope", "--requests", str(req)])


def test_toy_method_in_evaluate(toy, tiny_by_name, tmp_path):
    out = evaluate(tiny_by_name("tiny-llama"), ["toy"], EvalSpec(set_name="counterfact", n=1, n_gen=0),
                   out_dir=tmp_path)
    assert set(out["methods"]) == {"toy"} and out["methods"]["toy"]["records"] == 1


def test_toy_method_on_the_page(toy):
    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["model_choice"] = "tiny-llama"
    at.switch_page("pages/edit_compare.py").run()
    assert not at.exception
    assert "toy" in at.multiselect(key="ec_methods").options or "Toy" in at.multiselect(key="ec_methods").options
    at.multiselect(key="ec_methods").set_value(["toy"])
    at.number_input(key="ec_ngen").set_value(0)
    at.button(key="ec_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert list(at.session_state["ec_out"]["methods"]) == ["toy"]
