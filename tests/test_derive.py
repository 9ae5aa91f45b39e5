"""`python -m editkit hparams` (evaluation/derive.py): the rule that placed the shipped layers, applied to a model
without files. On the two real models' shipped AIE runs, each with the other model's files as template, it gives the
layers chosen by hand and validated for it; the files it writes are what every command then reads."""
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from editkit.cli import main
from editkit.core.errors import EditkitError
from editkit.editing.defaults import load_hparams, shipped_file, user_file
from editkit.editing.methods import get, names
from editkit.evaluation.derive import derive, peak, place
from editkit.model.shipped import SHIPPED
from editkit.tracing.aie import shipped_runs


def _stub(model: str, family: str):
    """What derive reads of a loaded model, for a shipped model (its facts in editkit/model/shipped.py)."""
    spec = SHIPPED[model]
    return SimpleNamespace(name=model, adapter=SimpleNamespace(n_layers=spec.layers, d_ff=spec.d_ff,
                                                               family=SimpleNamespace(name=family)))


@pytest.mark.parametrize("model,family,template", [("smollm2-135m", "llama", "gemma-3-270m"),
                                                   ("gemma-3-270m", "gemma", "smollm2-135m")])
def test_the_rule_gives_each_real_models_validated_layers_from_the_other(model, family, template):
    """SmolLM2's files were made from its traces by Gemma's rule, and Gemma's by hand from its own traces: from
    one model's shipped AIE run and the other model's files, every method's derived layers are the shipped ones,
    and MEMIT's and PMET's lambda, scaled by d_ff, is within 5% of the shipped value."""
    out = derive(_stub(model, family), shipped_runs()[model], template=template)
    assert out["peak"]["layer"] == 4 and out["template"] == template and list(out["methods"]) == names()
    for method, entry in out["methods"].items():
        shipped = json.loads(shipped_file(method, model).read_text())
        assert entry["hparams"]["layers"] == shipped["layers"], method
        assert entry["placement"] == get(method).placement
        if shipped.get("mom2_update_weight"):
            assert abs(entry["hparams"]["mom2_update_weight"] / shipped["mom2_update_weight"] - 1) < 0.05
        assert "not validated" in entry["hparams"]["source"] and template in entry["hparams"]["source"]


def test_placements_stay_inside_the_model():
    assert place("peak", [9], 18, 30, 7) == [7]
    assert place("window", [2, 3, 4, 5, 6], 18, 30, 0) == [0, 1, 2, 3, 4]  # shifted, not cut
    assert place("window", [2, 3, 4, 5, 6], 18, 30, 29) == [25, 26, 27, 28, 29]
    assert place("window", [2, 3, 4, 5, 6], 18, 4, 1) == [0, 1, 2, 3]  # wider than the model: every layer
    assert place("window", [1, 2], 4, 12, 6) == [6, 7]
    assert place("depth", [12, 13, 14, 15, 16], 18, 18, 0) == [12, 13, 14, 15, 16]  # the template itself
    assert place("depth", [12, 13, 14, 15, 16], 18, 35, 3) == [26, 27, 28, 29, 30]  # centre 14/17 x 34 = 28
    with pytest.raises(EditkitError, match="placement must be one of"):
        place("middle", [1], 4, 4, 1)


def test_a_run_of_another_model_or_without_the_mlp_effect_is_refused():
    run = shipped_runs()["gemma-3-270m"]
    with pytest.raises(EditkitError, match="18 layers, smollm2-135m has 30"):
        derive(_stub("smollm2-135m", "llama"), run)
    with pytest.raises(EditkitError, match="no MLP effect at the last subject token"):
        peak(replace(run, kinds={"hidden": {}}))
    with pytest.raises(EditkitError, match="template must be a shipped model"):
        derive(_stub("gemma-3-270m", "gemma"), run, template="gpt2-xl")


@pytest.fixture
def folder_model(tmp_path, monkeypatch, tiny_by_name):
    """tiny-llama saved as a folder named my-llama (no shipped file has that name), a private cache, and the AIE's
    facts replaced by one fact the tiny model 'knows' (its own greedy answer), so the traces run on it."""
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))
    lm = tiny_by_name("tiny-llama")
    folder = tmp_path / "my-llama"
    lm.model.save_pretrained(folder)
    lm.tok.save_pretrained(folder)
    from editkit.model.text import top_k

    prompt = "The Space Needle is in downtown"
    answer = top_k(lm, prompt, 1)[0]
    fact = {"known_id": 0, "prompt": prompt, "subject": "Space Needle", "attribute": answer.token.strip(),
            "answer": answer.token, "answer_id": answer.token_id}
    monkeypatch.setattr("editkit.tracing.aie.predicted_facts", lambda model: [fact])
    return str(folder)


@pytest.mark.full  # slow on 2 cores; the quick tier keeps cheaper checks of the same code
def test_the_command_traces_writes_and_every_command_reads_the_files(folder_model, capsys):
    with pytest.raises(EditkitError, match="editkit hparams --model"):
        load_hparams("rome", folder_model)  # before: the message names the command
    assert main(["hparams", "--model", folder_model, "--n", "1", "--samples", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["aie"].startswith("traced now") and out["template"] == "smollm2-135m" and out["peak"]["n_facts"] == 1
    for method in names():
        entry = out["methods"][method]
        assert entry["written"] == str(user_file(method, folder_model))
        hp = load_hparams(method, folder_model)
        assert list(hp.layers) == entry["hparams"]["layers"] and all(0 <= l < 4 for l in hp.layers)
        assert "not validated" in hp.source
    requests = folder_model + ".json"
    with open(requests, "w") as f:
        json.dump([{"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English",
                    "target_true": "French"}], f)
    assert main(["edit", "--model", folder_model, "--method", "rome", "--requests", requests, "--json"]) == 0
    edit = json.loads(capsys.readouterr().out)
    assert "not validated" in json.dumps(edit)  # the derived file's provenance travels with the result


@pytest.mark.full  # slow on 2 cores; the quick tier keeps cheaper checks of the same code
def test_shipped_files_are_kept_and_a_model_without_facts_is_one_line(tmp_path, monkeypatch, capsys):
    """A model with shipped files keeps them (the derived values are only shown, from its shipped AIE run without
    tracing); a model that predicts none of the known facts, and an AIE file that cannot be read, are one line."""
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    assert main(["hparams", "--model", "gemma-3-270m", "--methods", "rome,memit", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["aie"] == "the shipped AIE run of gemma-3-270m"  # no tracing
    assert all(entry["kept"] == str(shipped_file(m, "gemma-3-270m")) for m, entry in out["methods"].items())
    assert not (tmp_path / "hparams" / "rome" / "gemma-3-270m.json").exists()
    monkeypatch.setattr("editkit.tracing.aie.predicted_facts", lambda model: [])
    assert main(["hparams", "--model", "tiny-gpt2", "--n", "2"]) == 2
    assert "predicts none of the known facts" in capsys.readouterr().err
    assert main(["hparams", "--model", "tiny-gpt2", "--aie-run", str(tmp_path / "none.json")]) == 2
    assert "cannot read AIE results" in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [(["--methods", "memit,nosuch"], "not 'nosuch'"),
                                          (["--template", "nosuch"], "--template must be a shipped model")])
def test_hparams_names_a_wrong_method_or_template_before_tracing(argv, message, monkeypatch, capsys):
    """A typo in --methods or --template once surfaced only after minutes of tracing (or as an unrelated error)."""
    def no_trace(*a, **k):
        raise AssertionError("traced before checking the arguments")

    monkeypatch.setattr("editkit.tracing.aie.average_indirect_effect", no_trace)
    assert main(["hparams", "--model", "tiny-gpt2", *argv]) == 2
    assert message in capsys.readouterr().err
