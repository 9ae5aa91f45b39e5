"""Editing engine: ROME's identity, MEMIT's and PMET's normal equations, exact revert, patches, requests, hparams."""
import json

import pytest
import torch

from editkit.cli import main
from editkit.core.errors import EditkitError
from editkit.core.paths import DATA
from editkit.editing.defaults import load_hparams
from editkit.editing.methods.memit import apply_memit
from editkit.editing.methods.pmet import apply_pmet
from editkit.editing.methods.rome import apply_rome
from editkit.editing.requests import parse_requests
from editkit.editing.run import run_edit
from editkit.editing.spread import batch_update
from editkit.editing.stats import provenance, second_moment
from editkit.model.weights import EditHistory, applied, effective_weight, load_patch, save_patch

DARRIEUX = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English",
            "target_true": "French",
            "paraphrase_prompts": ["Where Danielle Darrieux is from, people speak the language of"],
            "neighborhood_prompts": ["The mother tongue of Michel Rocard is"]}


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _same(model, snap):
    return all(torch.equal(p, snap[n]) for n, p in model.named_parameters())


def _fast(lm, method, **extra):
    return load_hparams(method, lm, {"v_num_grad_steps": 3, **extra})


@pytest.mark.parametrize("rrome", [True, False])
def test_rome_makes_W_k_equal_v(tiny, rrome):
    hp = _fast(tiny, "rome", rrome=rrome)
    snap = _snapshot(tiny.model)
    result = apply_rome(tiny, parse_requests(DARRIEUX), hp, solves=True)
    assert _same(tiny.model, snap)  # the contract: weights untouched on return
    d = result.solves[0]
    layer = hp.layers[0]
    a = tiny.adapter
    with applied(tiny.model, result.delta):
        W, b = effective_weight(tiny, "down_proj", layer), a.down_bias(layer)
        out = W @ d.k_den + (b if b is not None else 0)
    torch.testing.assert_close(out, d.v_star, rtol=1e-4, atol=1e-4 * float(d.v_star.norm()))
    if not rrome:  # the original ROME hits v* at the plain prompt's key, not at k*
        assert not torch.allclose(d.k_den, d.k_star)
    info = result.info["requests"][0]
    assert info["relative_norm"] > 0 and len(info["losses"]) >= 1 and "division_factor" in info
    assert _same(tiny.model, snap)


@pytest.mark.parametrize("method", ["memit", "pmet"])
def test_batch_updates_satisfy_normal_equations(tiny, method):
    requests = parse_requests(DATA / "counterfact" / "counterfact_500.json")[:3]
    hp = _fast(tiny, method)
    snap = _snapshot(tiny.model)
    result = (apply_memit if method == "memit" else apply_pmet)(tiny, requests, hp, solves=True)
    assert _same(tiny.model, snap)
    assert [d.layer for d in result.solves] == list(hp.layers)
    for d in result.solves:  # Delta (lambda C + K K^T) = R K^T  (MEMIT Eq. 14)
        K, R, C, D = (getattr(d, k).double() for k in ("K", "R", "C", "delta"))
        lhs = D @ (hp.mom2_update_weight * C + K @ K.T)
        rhs = R @ K.T
        assert float((lhs - rhs).abs().max()) <= 1e-6 * float(rhs.abs().max())
    assert len(result.delta) == len(hp.layers)
    history = EditHistory(tiny.model)
    history.push(result.delta)
    assert not _same(tiny.model, snap)
    history.undo()
    assert _same(tiny.model, snap)  # bitwise


def test_batch_update_solves_the_least_squares_problem():
    torch.manual_seed(0)
    K, R = torch.randn(16, 3), torch.randn(8, 3)
    A = torch.randn(16, 16)
    C = A @ A.T / 16 + torch.eye(16) * 0.1
    D = batch_update(K, R, C, 2.0)
    torch.testing.assert_close(D @ (2.0 * C.double() + K.double() @ K.double().T), R.double() @ K.double().T)


def test_history_stacks_and_resets(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    snap = _snapshot(lm.model)
    name = lm.adapter.name("down_proj", 1) + ".weight"
    shape = dict(lm.model.named_parameters())[name].shape
    h = EditHistory(lm.model)
    h.push({name: torch.full(shape, 0.1)})
    h.push({name: torch.full(shape, 1e-7)})  # tiny deltas: subtraction would not restore bit-exactly
    assert len(h) == 2
    h.reset()
    assert _same(lm.model, snap)


def test_patch_round_trip_and_corruption(tiny_by_name, tmp_path):
    lm = tiny_by_name("tiny-llama")
    result = run_edit(lm, "rome", parse_requests(DARRIEUX), {"v_num_grad_steps": 2})
    path = save_patch(tmp_path / "edit", result.delta, {"method": "rome"})
    delta, manifest = load_patch(path)
    assert manifest["method"] == "rome" and all(torch.equal(delta[k], result.delta[k]) for k in delta)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(EditkitError):
        load_patch(path)
    bad = {k: v.clone() for k, v in delta.items()}
    next(iter(bad.values()))[0, 0] = float("nan")
    from editkit.model.weights import apply_delta
    with pytest.raises(EditkitError, match="NaN"):
        apply_delta(lm.model, bad)


def test_requests_in_three_schemas():
    own = parse_requests(DARRIEUX)[0]
    cf = parse_requests(json.loads((DATA / "counterfact" / "counterfact_first5.json").read_text()))[0]
    ee = parse_requests(json.loads((DATA / "counterfact" / "counterfact-edit.json").read_text())[:1])[0]
    for r in (own, cf, ee):
        assert r.prompt == "The mother tongue of {} is" and r.subject == "Danielle Darrieux"
        assert r.target_new == " English" and r.target_true == " French"
        assert r.rewrite == "The mother tongue of Danielle Darrieux is"
    assert cf.paraphrase_prompts and cf.neighborhood_prompts and cf.generation_prompts
    assert ee.paraphrase_prompts and ee.neighborhood_prompts
    easy = parse_requests({"prompts": ["Who is the father of Zeus?"], "subject": "Zeus", "target_new": ["Kronos"],
                           "ground_truth": ["Cronus"], "rephrase_prompts": ["Zeus's father is"],
                           "locality_inputs": {"neighborhood": {"prompt": ["Hera's father is"],
                                                                "ground_truth": ["Cronus"]}}})[0]
    assert easy.prompt == "Who is the father of {}?" and easy.neighborhood_prompts == ["Hera's father is"]


@pytest.mark.parametrize("record,message", [
    ({"prompt": "no placeholder", "subject": "x", "target_new": "y"}, "does not occur"),
    ({"prompt": "{} is", "subject": "", "target_new": "y"}, "subject is empty"),
    ({"prompt": "{} is", "subject": "Paris", "target_new": "  "}, "new target is empty"),
    ({"prompt": "{} is {}", "subject": "Paris", "target_new": "x"}, "exactly one"),
    ({"prompt": "{} is", "subject": "Paris", "target_new": "x", "target_true": "x"}, "same as the true target"),
    ('{"prompt": ', "not valid JSON"),
    ("/no/such/file.json", "no requests file"),
    ([], "no requests"),
])
def test_malformed_requests_are_clear_errors(record, message):
    with pytest.raises(EditkitError, match=message):
        parse_requests(record)


@pytest.mark.parametrize("override,message", [
    ({"layers": [99]}, "out of range"), ({"layers": []}, "non-empty"), ({"v_lr": float("nan")}, "finite"),
    ({"v_lr": -1}, "out of range"), ({"clamp_norm_factor": "big"}, "finite"), ({"layers": [2, 1]}, "increasing"),
    ({"v_num_grad_steps": 2.5}, "whole number"),
])
def test_bad_hparams_are_clear_errors(tiny_by_name, override, message):
    with pytest.raises(EditkitError, match=message):
        load_hparams("memit", tiny_by_name("tiny-gpt2"), override)
    with pytest.raises(EditkitError, match="method must be"):
        load_hparams("grace", tiny_by_name("tiny-gpt2"))


def test_stats_are_cached_with_provenance_and_rebuilt(tiny_by_name, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    lm = tiny_by_name("tiny-neox")
    C = second_moment(lm, [0, 2], 500)
    assert C[0].shape == (256, 256) and torch.allclose(C[0], C[0].T)
    assert torch.linalg.eigvalsh(C[2].double()).min() > -1e-6  # positive semi-definite
    meta = provenance(lm, 2, 500)
    assert meta["tokens"] >= 500 and meta["layer"] == 2 and "WikiText" in meta["corpus"]
    files = list((tmp_path / "stats").rglob("layer2-*.safetensors"))
    files[0].write_bytes(b"garbage")
    again = second_moment(lm, [2], 500)[2]
    assert torch.allclose(again, C[2])


def test_cli_edit(tmp_path, capsys):
    req = tmp_path / "req.json"
    req.write_text(json.dumps([DARRIEUX]))
    hp = tmp_path / "hp.json"
    hp.write_text(json.dumps({"v_num_grad_steps": 2}))
    code = main(["edit", "--model", "tiny-gpt2", "--method", "memit", "--requests", str(req), "--hparams", str(hp),
                 "--save-patch", str(tmp_path / "p"), "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    r = out["requests"][0]
    assert set(r["pre"]) == {"rewrite", "paraphrase", "neighborhood"} and "p_true" in r["post"]["rewrite"][0]
    assert (tmp_path / "p.safetensors").exists() and (tmp_path / "p.json").exists()
    made = (tmp_path / "p.safetensors").read_bytes()
    again = ["edit", "--model", "tiny-gpt2", "--method", "rome", "--requests", str(req), "--hparams", str(hp),
             "--save-patch", str(tmp_path / "p")]
    assert main(again) == 2  # the patch made above is never replaced silently
    assert "already exist; give another --save-patch name" in capsys.readouterr().err
    assert (tmp_path / "p.safetensors").read_bytes() == made
    assert main([*again, "--overwrite"]) == 0 and (tmp_path / "p.safetensors").read_bytes() != made
    capsys.readouterr()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"prompt": "no braces", "subject": "x", "target_new": "y"}]))
    assert main(["edit", "--model", "tiny-gpt2", "--method", "rome", "--requests", str(bad)]) == 2
    assert "error:" in capsys.readouterr().err
