"""The layer sweep (Hase et al. 2023): ROME at each layer beside the request's causal trace."""
import json

import pytest

from editkit.cli import main
from editkit.core.errors import EditkitError
from editkit.editing.requests import EditRequest
from editkit.evaluation.layer_sweep import layer_sweep, parse_layers

REQUEST = EditRequest("The mother tongue of {} is", "Danielle Darrieux", "English", "French",
                      ["Danielle Darrieux, a native speaker of"], ["The mother tongue of Jean Gabin is"])
FAST = {"v_num_grad_steps": 3}


def test_parse_layers():
    assert parse_layers("all", 4) == [0, 1, 2, 3]
    assert parse_layers("1-2", 4) == [1, 2] and parse_layers("3,1", 4) == [1, 3] and parse_layers([2], 4) == [2]
    for bad in ("5", "a", "2-", "-1"):
        with pytest.raises(EditkitError):
            parse_layers(bad, 4)


def test_layer_sweep_edits_each_layer_and_traces(tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    before = {n: p.detach().clone() for n, p in lm.model.named_parameters()}
    out = layer_sweep(lm, REQUEST, "0,2", hparams=FAST, trace_kind="mlp", samples=2)
    assert [r.layer for r in out.rows] == [0, 2]
    for r in out.rows:
        assert r.relative_norm > 0 and -1 <= r.efficacy_magnitude <= 1 and r.efficacy in (0.0, 1.0)
    # the rows differ: each one is an edit of its own layer
    assert out.rows[0].relative_norm != out.rows[1].relative_norm
    t = out.trace
    assert len(t.scores) == lm.adapter.n_layers and t.peak_layer == max(range(len(t.scores)), key=t.scores.__getitem__)
    assert t.answer == " French" or t.answer.strip() == "French"
    assert out.best_layer in (0, 2)
    assert all(p.equal(before[n]) for n, p in lm.model.named_parameters())
    data = json.loads(json.dumps(out.to_json()))
    assert type(out).from_json(data).to_json() == data and len(out.to_frame()) == 2


def test_layer_sweep_needs_the_true_target(tiny_by_name):
    req = EditRequest("The mother tongue of {} is", "Danielle Darrieux", "English")
    with pytest.raises(EditkitError, match="true target"):
        layer_sweep(tiny_by_name("tiny-gpt2"), req, "0")


def test_cli_layer_sweep(tmp_path, capsys):
    req = tmp_path / "req.json"
    req.write_text(json.dumps(REQUEST.to_dict()))
    hp = tmp_path / "hp.json"
    hp.write_text(json.dumps(FAST))
    assert main(["layer-sweep", "--model", "tiny-gpt2", "--requests", str(req), "--layers", "0-1",
                 "--trace-kind", "none", "--hparams", str(hp), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["layer"] for r in out["rows"]] == [0, 1] and out["trace"] is None
    assert main(["layer-sweep", "--model", "tiny-gpt2", "--requests", str(req), "--layers", "9"]) == 2
    assert "layers must be within" in capsys.readouterr().err
