"""The bleed map: the update's predicted change of the edited layer's output equals the measured change."""
import json

import pytest
import torch

from editkit.cli import main
from editkit.editing.requests import EditRequest
from editkit.evaluation.bleed import bleed_map, prompts_for, relation_of
from editkit.model.tokens import find_subject_range

REQUEST = EditRequest("The mother tongue of {} is", "Danielle Darrieux", "English", "French",
                      ["Danielle Darrieux, a native speaker of"],
                      ["The mother tongue of Michel Rocard is", "The mother tongue of Jean Gabin is",
                       "Paris is the capital of"])
FAST = {"v_num_grad_steps": 4}


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama", "tiny-gemma3"])
def test_rome_prediction_equals_measured_change(tiny_by_name, name):
    """ROME Eq. 2: at every token of every prompt the down-projection output changes by Lambda (C^-1 k*)^T k."""
    lm = tiny_by_name(name)
    before = _snapshot(lm.model)
    out = bleed_map(lm, "rome", REQUEST, FAST, n_facts=5)
    assert out.formula.startswith("Lambda")
    assert type(out).from_json(out.to_json()) == out and len(out.to_frame()) == len(out.rows)
    check = out.check
    assert check["largest_change"] > 1e-3  # the edit did change the layer's output
    assert check["max_error"] < 1e-4, check  # float32 rounding of W k vs (W + dW) k, nothing more
    assert all(torch.equal(p, before[n]) for n, p in lm.model.named_parameters())  # the model is untouched
    rows = {r.prompt: r for r in out.rows}
    rewrite = rows[REQUEST.rewrite]
    # the edited subject's own key on the bare prompt is one of the templates averaged into k*: share near 1
    assert rewrite.source == "rewrite" and 0.3 < rewrite.share < 3
    assert all(len(r.shares) == len(r.tokens) for r in out.rows)
    assert {r.source for r in out.rows} >= {"rewrite", "paraphrase", "neighborhood"}


def test_share_is_the_projection_for_other_methods(tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    out = bleed_map(lm, "memit", REQUEST, FAST, n_facts=0)
    assert out.formula.startswith("Delta W k") and len(out.maps) == 2
    assert out.check["max_error"] < 1e-4  # first edited layer: its keys are unchanged, the change is dW k
    assert all(isinstance(r.share, float) for r in out.rows)


def test_rome_share_hand_computed(tiny_by_name):
    """s(k) = (C^-1 k*)^T k / (C^-1 k*)^T k*: recompute it for one neighbour token from scratch."""
    from editkit.editing.defaults import load_hparams
    from editkit.editing.keys import key_star, keys_at
    from editkit.editing.stats import key_statistics

    lm = tiny_by_name("tiny-gpt2")
    out = bleed_map(lm, "rome", REQUEST, FAST, n_facts=0)
    row = next(r for r in out.rows if r.prompt == "The mother tongue of Jean Gabin is")
    hp = load_hparams("rome", lm, FAST)
    layer = hp.layers[0]
    C = key_statistics(lm, [layer], hp)[layer].double()
    u = torch.linalg.solve(C, key_star(lm, layer, REQUEST, hp).double())
    k = keys_at(lm, layer, [(row.prompt, 0)], "Jean Gabin")[0].double()  # the key at the subject's last token
    t = find_subject_range(lm.tok, row.prompt, "Jean Gabin")[1] - 1
    assert row.shares[t] == pytest.approx(float(u @ k / (u @ key_star(lm, layer, REQUEST, hp).double())),
                                             rel=1e-3, abs=1e-4)


def test_neighbours_include_known_facts_of_the_relation():
    assert relation_of(REQUEST) == "P103"  # "The mother tongue of {} is" is CounterFact's P103 template
    rows = prompts_for(REQUEST, n_facts=5)
    facts = [r for r in rows if r["source"] == "known fact"]
    assert len(facts) == 5 and all("Danielle Darrieux" not in r["prompt"] for r in facts)
    assert [r["source"] for r in rows[:2]] == ["rewrite", "paraphrase"]
    assert len({r["prompt"] for r in rows}) == len(rows)


def test_cli_bleed(tmp_path, capsys):
    req = tmp_path / "req.json"
    req.write_text(json.dumps(REQUEST.to_dict()))
    assert main(["bleed", "--model", "tiny-gpt2", "--method", "rome", "--requests", str(req), "--facts", "2",
                 "--hparams-json", json.dumps(FAST), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["check"]["max_error"] < 1e-4 and out["rows"]
    assert main(["bleed", "--model", "tiny-gpt2", "--method", "rome", "--requests", str(tmp_path / "none.json")]) == 2
    assert "error:" in capsys.readouterr().err
