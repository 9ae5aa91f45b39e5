"""Sweeps: parameter grids, resumption, cached settings, target reuse, the Pareto front."""
import json
from dataclasses import replace

import pytest
import torch

from editkit.cli import main
from editkit.core.errors import EditkitError
from editkit.editing.memo import reuse_targets
from editkit.editing.run import run_edit
from editkit.evaluation.sweep import (
    SWEEP,
    dominates,
    front_2d,
    grid,
    pareto,
    parse_param,
    parse_params,
    sweep,
)

FAST = ["v_num_grad_steps=2"]
SMALL = replace(SWEEP, n=2, greedy_tokens=0)


def test_parse_and_grid():
    assert parse_param("v_lr=0.1,1e-3") == ("v_lr", [0.1, 0.001])
    assert parse_param("layers=3,4") == ("layers", [[3], [4]])
    assert parse_param("layers=[2,3],[3,4]") == ("layers", [[2, 3], [3, 4]])
    assert parse_param("rrome=true,false") == ("rrome", [True, False])
    for bad in ("v_lr", "=1", "v_lr=", "v_lr=1,,2"):
        with pytest.raises(EditkitError):
            parse_param(bad)
    with pytest.raises(EditkitError, match="twice"):
        parse_params(["v_lr=1", "v_lr=2"])
    g = grid({"a": [1, 2], "b": [3, 4, 5]})
    assert len(g) == 6 and g[0] == {"a": 1, "b": 3} and g[-1] == {"a": 2, "b": 5}
    assert grid({}) == [{}]


def _row(e, g, s):
    return {"efficacy": {"mean": e}, "generalization": {"mean": g}, "specificity": {"mean": s}}


def test_pareto_front():
    rows = [_row(100, 90, 60), _row(100, 90, 70), _row(90, 95, 65), _row(80, 80, 80), _row(80, 80, 75)]
    assert dominates(rows[1], rows[0]) and not dominates(rows[0], rows[1]) and not dominates(rows[1], rows[1])
    assert pareto(rows) == [1, 2, 3]
    assert front_2d(rows, "specificity", "efficacy") == [1, 3]  # sorted by specificity


def test_sweep_resumes_and_reuses_cached_settings(tiny_by_name, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    lm = tiny_by_name("tiny-gpt2")
    params = FAST + ["mom2_shrinkage=0,0.5,0.9"]
    calls = []

    def interrupt(f, msg):  # stop while the second setting is at its second record
        calls.append(msg)
        if "setting 2/3" in msg and "records 2-2" in msg:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sweep(lm, "rome", params, SMALL, progress=interrupt)
    out = sweep(lm, "rome", params, SMALL)
    # setting 1 came from the cache, setting 2 resumed at its second record, setting 3 ran in full
    assert [r["cached"] for r in out.settings] == [True, False, False]
    assert out.computed_records == 1 + 2
    again = sweep(lm, "rome", params, SMALL)
    assert all(r["cached"] for r in again.settings) and again.computed_records == 0
    assert [r["efficacy"] for r in again.settings] == [r["efficacy"] for r in out.settings]
    wider = sweep(lm, "rome", FAST + ["mom2_shrinkage=0.5,0.7"], SMALL)
    assert [r["cached"] for r in wider.settings] == [True, False]
    # the settings differ only in the solve: the target vectors were optimized once per record
    assert wider.reused_targets == {"hits": 2, "misses": 0}  # all from the memo on disk
    data = json.loads(json.dumps(out.to_json()))
    assert type(out).from_json(data).to_json() == data and len(out.to_frame()) == 1 + 3 and out.figure().data
    assert set(out.unedited) >= {"efficacy", "specificity", "score"}
    assert out.pareto and all(isinstance(r["pareto"], bool) for r in out.settings)


def test_reused_targets_give_the_same_edit(tiny_by_name, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    lm = tiny_by_name("tiny-llama")
    req = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English"}
    fresh = run_edit(lm, "rome", [req], {"v_num_grad_steps": 3, "mom2_shrinkage": 0.3})
    with reuse_targets() as memo:
        run_edit(lm, "rome", [req], {"v_num_grad_steps": 3})
        again = run_edit(lm, "rome", [req], {"v_num_grad_steps": 3, "mom2_shrinkage": 0.3})
        assert (memo.hits, memo.misses) == (1, 1)
        run_edit(lm, "rome", [req], {"v_num_grad_steps": 3, "v_weight_decay": 0.01})  # a target field: new
        assert (memo.hits, memo.misses) == (1, 2)
    for name, d in fresh.delta.items():
        assert torch.equal(d, again.delta[name])
    with reuse_targets() as memo:  # a new context reads the disk entries
        run_edit(lm, "memit", [req], {"v_num_grad_steps": 3})
        run_edit(lm, "memit", [req], {"v_num_grad_steps": 3, "mom2_update_weight": 7})
        assert (memo.hits, memo.misses) == (1, 1)


def test_alphaedit_reuses_memits_targets(tiny_by_name, tmp_path, monkeypatch):
    """AlphaEdit optimizes MEMIT's targets (same fields, same residual site); its null-space fields act only in the
    solve, so an evaluation of both methods optimizes each request's targets once, and the edit is unchanged."""
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    lm = tiny_by_name("tiny-llama")
    req = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English"}
    shared = {"v_num_grad_steps": 3, "layers": [1, 2], "clamp_norm_factor": 0.75, "v_lr": 0.5}
    fresh = run_edit(lm, "alphaedit", [req], dict(shared, nullspace_threshold=0.05))
    with reuse_targets(disk=False) as memo:
        run_edit(lm, "memit", [req], shared)
        again = run_edit(lm, "alphaedit", [req], dict(shared, nullspace_threshold=0.05))
        assert (memo.hits, memo.misses) == (1, 1)
        run_edit(lm, "alphaedit", [req], dict(shared, v_lr=0.4))  # a target field: optimized afresh
        assert (memo.hits, memo.misses) == (1, 2)
    for name, d in fresh.delta.items():
        assert torch.allclose(d, again.delta[name], atol=1e-6, rtol=1e-5)


def test_sweep_starts_from_the_given_overrides(tiny_by_name, tmp_path, monkeypatch):
    """Every setting is the defaults + the user's overrides + the grid's values (the grid wins on a shared key)."""
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    lm = tiny_by_name("tiny-gpt2")
    out = sweep(lm, "rome", ["mom2_shrinkage=0,0.5"], replace(SMALL, n=1),
                hparams={"v_num_grad_steps": 2, "v_weight_decay": 0.25, "mom2_shrinkage": 0.9})
    assert [r["hparams"]["mom2_shrinkage"] for r in out.settings] == [0, 0.5]
    assert all(r["hparams"]["v_weight_decay"] == 0.25 for r in out.settings)
    assert out.overrides["v_weight_decay"] == 0.25 and out.defaults["v_weight_decay"] != 0.25


def test_sweep_rejects_bad_settings_before_running(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    with pytest.raises(EditkitError, match="unknown hyperparameter"):
        sweep(lm, "rome", ["no_such=1"], replace(SWEEP, n=1))
    with pytest.raises(EditkitError, match="out of range"):
        sweep(lm, "rome", ["mom2_shrinkage=0.5,3"], replace(SWEEP, n=1))
    with pytest.raises(EditkitError, match="method must be"):
        sweep(lm, "grace", [], replace(SWEEP, n=1))


def test_cli_sweep(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    args = ["sweep", "--model", "tiny-gpt2", "--method", "memit", "--param", "v_num_grad_steps=2",
            "--param", "mom2_update_weight=10,100", "--n", "2", "--batch", "2", "--greedy-tokens", "0"]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["settings"]) == 2 and out["batch"] == 2
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "(cached)" in text and "mom2_update_weight=100" in text
    assert main(["sweep", "--model", "tiny-gpt2", "--method", "rome", "--param", "v_lr"]) == 2
    assert "name=v1,v2" in capsys.readouterr().err
