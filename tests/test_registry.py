"""A method is one file plus one hyperparameter file: a toy method registered here (with its JSON defaults in a
folder of its own) appears in the CLI, the evaluation, the bleed map, the layer sweep, the editing benchmark and the
Edit & compare page through the registry alone; what they read is the typed EditResult, never a method's name."""
import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from editkit.cli import main
from editkit.core.errors import EditkitError
from editkit.editing.bench import bench_edit
from editkit.editing.defaults import load_hparams
from editkit.editing.hparams import Hparams
from editkit.editing.methods import Method, get, names, register, unregister
from editkit.editing.result import EditResult, RequestReport
from editkit.editing.run import first_use, run_edit
from editkit.editing.share import update_share
from editkit.evaluation import EvalSpec, evaluate
from editkit.evaluation.bleed import bleed_map
from editkit.evaluation.layer_sweep import layer_sweep

APP = str(Path(__file__).resolve().parent.parent / "app.py")
REQUEST = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English",
           "target_true": "French", "neighborhood_prompts": ["The mother tongue of Jean Gabin is"]}


@dataclass(frozen=True)
class ToyHparams(Hparams):
    scale: float = 0.0  # the toy update: scale times an all-ones matrix


def apply_toy(lm, requests, hp, progress=None, reference=False, solves=False):
    """The contract's minimum: a delta; run_edit fills in the norms and a report per request."""
    layer = hp.layers[0]
    dW = torch.full_like(lm.adapter.down_weight(layer), hp.scale)
    delta = lm.adapter.weight_delta("down_proj", layer, dW)
    return EditResult("toy", list(requests), delta, hp, [RequestReport(r.case_id) for r in requests], seconds=0.01)


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
    assert first_use(lm, hp) == {}  # it declares no statistics or templates: none are computed for it
    result = run_edit(lm, "toy", REQUEST)
    assert set(result.delta) == {lm.adapter.param_name("down_proj", 1)}
    norm = result.norms[lm.adapter.param_name("down_proj", 1)]
    assert norm.relative_norm == pytest.approx(norm.delta_norm / norm.weight_norm) and norm.delta_norm > 0
    assert [r.steps for r in result.per_request] == [0] and result.to_json()["info"]["norms"]
    with pytest.raises(EditkitError, match="unknown hyperparameter 'wobble'"):
        load_hparams("toy", lm, {"wobble": 1})


def test_toy_method_in_the_cli(toy, tmp_path, capsys):
    req = tmp_path / "req.json"
    req.write_text(json.dumps([REQUEST]))
    assert main(["edit", "--model", "tiny-llama", "--method", "toy", "--requests", str(req), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "toy" and out["hparams"]["scale"] == 0.01
    # an unregistered name is refused in one line, naming the registered ones (the toy too)
    assert main(["edit", "--model", "tiny-llama", "--method", "nope", "--requests", str(req)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: method must be one of") and "toy" in err


def test_toy_method_in_evaluate(toy, tiny_by_name, tmp_path):
    out = evaluate(tiny_by_name("tiny-llama"), ["toy"], EvalSpec(set_name="counterfact", n=1, n_gen=0),
                   out_dir=tmp_path)
    assert set(out.methods) == {"toy"} and out.methods["toy"]["records"] == 1


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
    assert list(at.session_state["ec_out"].methods) == ["toy"]


def test_toy_method_in_the_bleed_map(toy, tiny_by_name):
    """Without a prediction the bleed map shows the measured rises only; with the update's own projection declared
    (share.update_share, what MEMIT, PMET and AlphaEdit declare) it predicts and checks like theirs."""
    lm = tiny_by_name("tiny-llama")
    out = bleed_map(lm, "toy", REQUEST, n_facts=2)
    assert out.formula is None and out.check is None and out.maps == [lm.adapter.param_name("down_proj", 1)]
    assert out.rows and all(r.share is None and isinstance(r.delta_p_new, float) for r in out.rows)
    out.figure()
    register(dataclasses.replace(get("toy"), predict_share=update_share))
    out = bleed_map(lm, "toy", REQUEST, n_facts=2)
    assert out.formula.startswith("Delta W k")
    assert out.check["max_error"] < 1e-4 and all(isinstance(r.share, float) for r in out.rows)
    assert "ΔW" in out.figure().layout.xaxis.title.text


def test_toy_method_in_the_layer_sweep(toy, tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    out = layer_sweep(lm, REQUEST, "0,1", method="toy", trace_kind=None)
    assert out.method == "toy" and [r.layer for r in out.rows] == [0, 1]
    assert all(r.relative_norm > 0 for r in out.rows) and out.default_layers == [1]
    fig = out.figure()
    assert list(fig.data[0].x) == [0, 1]
    json.dumps(out.to_json())


def test_toy_method_in_bench_edit(toy, tiny_by_name):
    out = bench_edit(tiny_by_name("tiny-llama"), n=2, methods=["toy"], say=lambda row: None)
    assert [r["method"] for r in out["results"]] == ["toy", "toy (reference)", "toy"]
    assert out["results"][2]["requests"] == 2 and out["results"][0]["steps"] == 0
    assert out["reference_method"] == "toy" and "toy_speedup" in out
    assert out["warmup_s"] is not None  # one untimed edit first: a device's first use lands on no timed method


@pytest.mark.parametrize("argv,message", [
    (["--methods", "nosuch"], "method must be one of .* not 'nosuch'"),  # once an empty table, no word
    (["--n", "0"], "--n must be at least 1"),
    (["--n", "500", "--methods", "ultraedit"], "at most 499 of the 500"),
])
def test_bench_edit_refuses_bad_input_in_words(argv, message, capsys):
    assert main(["bench", "edit", "--model", "tiny-llama", *argv]) == 2
    assert re.search(message, capsys.readouterr().err)
