"""UltraEdit: the ridge solve (its normal equations), the lifelong statistics (equal to a batch recomputation over
every row seen), upstream's formula, the keys and gradients at the target tokens, the update in the parameter's
layout, the sequence state (two rounds equal carrying the statistics by hand), the direction of an edit, bad
hyperparameters, and the registry (CLI, evaluate, page)."""
import json
from pathlib import Path

import pytest
import torch

from editkit.cli import main
from editkit.core.errors import EditkitError
from editkit.core.paths import DATA
from editkit.editing.defaults import load_hparams
from editkit.editing.methods import get, names
from editkit.editing.methods.ultraedit import (
    EPS,
    RunningStats,
    answer_batch,
    group_of,
    keys_and_gradients,
    pseudo_values,
    ridge_solve,
    ultraedit_update,
)
from editkit.editing.requests import parse_requests
from editkit.editing.run import first_use, run_edit
from editkit.editing.sequence import SequenceState
from editkit.evaluation import EvalSpec, evaluate
from editkit.model.scoring import score_targets
from editkit.model.sites import Site
from editkit.model.weights import applied

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def _requests(n=3, start=0):
    return parse_requests(DATA / "counterfact" / "counterfact_500.json")[start:start + n]


def _rel(x, y):
    return float((x - y).abs().max() / y.abs().max().clamp_min(1e-300))


# --- the math ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,d", [(7, 40), (60, 20)])  # fewer rows than columns (n x n form) and more (d x d)
@pytest.mark.parametrize("ridge", [1.0, 0.01])
def test_ridge_solve_normal_equations(n, d, ridge):
    g = torch.Generator().manual_seed(n + d)
    K = torch.randn(n, d, generator=g, dtype=torch.float64) * 3
    V = torch.randn(n, 11, generator=g, dtype=torch.float64)
    D = ridge_solve(K, V, ridge)
    assert D.shape == (d, 11) and D.dtype == torch.float64
    lhs = (K.T @ K + ridge * torch.eye(d, dtype=torch.float64)) @ D  # (K^T K + ridge I) Delta = K^T V
    assert _rel(lhs, K.T @ V) < 1e-10
    assert _rel(D, torch.linalg.solve(K.T @ K + ridge * torch.eye(d, dtype=torch.float64), K.T @ V)) < 1e-9
    assert _rel(ridge_solve(K.float(), V.float(), ridge), D) < 1e-5  # float32 inputs are solved in float64


def test_running_statistics_equal_a_batch_recomputation():
    g = torch.Generator().manual_seed(0)
    sizes = ((1, 1.0), (5, 3.0), (3, 0.1), (9, 10.0))  # rows and scale of each round
    rounds = [torch.randn(m, 6, generator=g, dtype=torch.float64) * s + s for m, s in sizes]
    stats = RunningStats.empty(6)
    for i, x in enumerate(rounds):
        stats = stats.merged(x)
        seen = torch.cat(rounds[:i + 1])
        assert stats.n == len(seen)
        assert _rel(stats.mean, seen.mean(0)) < 1e-12
        if len(seen) > 1:
            assert _rel(stats.std, seen.std(0)) < 1e-6  # upstream's n - 1 + eps: eps / n relative
    # any split into rounds, in any order, gives the same statistics
    again = RunningStats.empty(6).merged(torch.cat(rounds[::-1]))
    assert _rel(again.mean, stats.mean) < 1e-12 and _rel(again.m2, stats.m2) < 1e-12
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    assert _rel(stats.normalize(x), (x - stats.mean) / (stats.std + EPS)) < 1e-15
    assert stats.merged(torch.zeros(0, 6)) is stats
    with pytest.raises(EditkitError):
        stats.merged(torch.zeros(2, 5))


def test_update_is_upstreams_formula():
    """Normalise [k, g] with the running statistics, split, v = -lr ||k_hat||^2 g_hat, then upstream's d x d solve
    (K^T K + I)^-1 K^T V with the raw keys; the result in math layout is its transpose."""
    g = torch.Generator().manual_seed(3)
    K = torch.randn(9, 16, generator=g, dtype=torch.float64) * 2 + 0.5
    G = torch.randn(9, 5, generator=g, dtype=torch.float64) * 1e-2
    earlier = torch.randn(20, 21, generator=g, dtype=torch.float64)
    stats = RunningStats.empty(21).merged(earlier).merged(torch.cat([K, G], 1))
    up = ultraedit_update(K, G, stats, lr=1e-3)
    z = torch.cat([K, G], 1)
    seen = torch.cat([earlier, z])
    z_hat = (z - seen.mean(0)) / (seen.std(0) + EPS)
    k_hat, g_hat = z_hat[:, :16], z_hat[:, 16:]
    V = -1e-3 * (k_hat * k_hat).sum(-1, keepdim=True) * g_hat
    shift = torch.linalg.solve(K.T @ K + torch.eye(16, dtype=torch.float64), K.T @ V)  # (d_in, d_out)
    assert _rel(up["values"], V) < 1e-6 and _rel(pseudo_values(k_hat, g_hat, 1e-3), V) < 1e-12
    assert up["delta"].shape == (5, 16) and _rel(up["delta"], shift.T) < 1e-6


# --- keys and gradients ------------------------------------------------------------------------------------------
def test_keys_and_gradients_at_the_target_tokens(tiny_by_name):
    """The NLL at the recorded positions is the target's own (score_targets), the keys are the down-projection's
    inputs there, and the gradient is the cross-entropy's: a step along it changes the loss by its norm."""
    lm = tiny_by_name("tiny-llama")
    reqs = _requests(3)
    prompts, targets = [r.rewrite for r in reqs], [r.target_new for r in reqs]
    got = keys_and_gradients(lm, prompts, targets, [1, 2])
    scores = score_targets(lm, prompts, targets)
    want = torch.tensor([-lp for s in scores for lp in s.token_logprobs])
    torch.testing.assert_close(got["nll"], want, rtol=1e-4, atol=1e-4)
    assert got["keys"][1].shape == (len(want), lm.adapter.d_ff) and got["grads"][2].shape == (len(want), 64)
    # one row, finite difference along the recorded gradient of layer 1's output at its first target position
    p_ids = lm.tok(prompts[0], add_special_tokens=True)["input_ids"]
    t_ids = lm.tok(targets[0], add_special_tokens=False)["input_ids"]
    n_p, n = len(p_ids), len(t_ids)
    g0 = got["grads"][1][got["row"] == 0][0]
    ids = torch.tensor([p_ids + t_ids[:-1]])

    def loss(eps):
        def push(h):
            h = h.clone()
            h[0, n_p - 1] += eps * g0 / g0.norm()
            return h
        with torch.no_grad():
            hidden = lm.runner.read(["mlp_key.1"], full=True, input_ids=ids,
                                    edit=lambda hooks: hooks.set(lm.adapter.down_proj(1), push)).hidden
        logits = lm.runner.logits(hidden[0, n_p - 1:n_p - 1 + n], norm=False)
        return torch.nn.functional.cross_entropy(logits, torch.tensor(t_ids)).double() * n

    total = len(want)  # the loss is the mean over every target token of the batch
    slope = (loss(0.05) - loss(-0.05)) / 0.1 / total
    assert abs(float(slope) - float(g0.norm())) < 0.05 * float(g0.norm())


# --- the method --------------------------------------------------------------------------------------------------
def test_ultraedit_on_every_family(tiny):
    """Each layer's update solves its normal equations with the round's keys and pseudo-values, is stored in the
    parameter's layout (GPT-2's Conv1D transposed), the weights are never changed, the typed result reports every
    parameter, request and layer, and the state holds the statistics of every row of the round (shared by the
    layers: one group per module shape), equal to a batch recomputation over those rows."""
    hp = load_hparams("ultraedit", tiny)
    requests = _requests()
    snap = {n: p.detach().clone() for n, p in tiny.model.named_parameters()}
    result = run_edit(tiny, "ultraedit", requests, hp, solves=True)
    assert all(torch.equal(p, snap[n]) for n, p in tiny.model.named_parameters())
    a = tiny.adapter
    assert [s.layer for s in result.solves] == list(hp.layers) and first_use(tiny, hp) == {}
    for s in result.solves:
        K, V, D = s.keys, s.values, s.delta
        assert K.dtype == torch.float64 and s.part == "down_proj"
        lhs = (K.T @ K + hp.ridge * torch.eye(K.shape[1], dtype=torch.float64)) @ D.T
        assert _rel(lhs, K.T @ V) < 1e-8  # (K^T K + ridge I) Delta = K^T V
        # push-through: V - K Delta = ridge (K K^T + ridge I)^-1 V, what the solve leaves unwritten
        rest = hp.ridge * torch.linalg.solve(K @ K.T + hp.ridge * torch.eye(len(K), dtype=torch.float64), V)
        assert _rel(V - s.predicted, rest) < 1e-8
        # the values are built from the running statistics as stored: v = -lr ||k_hat||^2 g_hat
        z_hat = s.stats.normalize(torch.cat([K, s.gradients], 1))
        assert _rel(s.k_hat, z_hat[:, :K.shape[1]]) < 1e-12 and _rel(s.g_hat, z_hat[:, K.shape[1]:]) < 1e-12
        assert _rel(V, pseudo_values(s.k_hat, s.g_hat, hp.lr)) < 1e-12
        name = a.param_name("down_proj", s.layer)
        stored = result.delta[name]
        assert stored.shape == dict(tiny.model.named_parameters())[name].shape
        if a.family.conv1d:
            assert stored.shape == (a.d_ff, a.d_model)
        torch.testing.assert_close(stored.T if a.family.conv1d else stored, D.float(), rtol=0, atol=0)
        norm = result.norms[name]
        assert abs(norm.delta_norm - float(D.norm())) < 1e-4 * float(D.norm())
        assert abs(norm.weight_norm - float(snap[name].norm())) < 1e-4 * norm.weight_norm
    assert [r.layer for r in result.layers] == list(hp.layers) and set(result.norms) == set(result.delta)
    assert [r.case_id for r in result.per_request] == [r.case_id for r in requests]
    assert all(r.steps == 0 and r.details["tokens"] > 0 for r in result.per_request)
    rows = torch.cat([torch.cat([s.keys, s.gradients], 1) for s in result.solves])
    group = group_of(tiny, hp.layers[0], "shape")
    st = result.state.tensors
    assert result.state.edits == 3 and int(st[f"stats.{group}.n"]) == len(rows)
    assert _rel(st[f"stats.{group}.mean"], rows.mean(0)) < 1e-10
    assert _rel((st[f"stats.{group}.m2"] / (len(rows) - 1)).sqrt(), rows.std(0)) < 1e-8
    json.dumps(result.to_json())  # the CLI's JSON


def test_applying_the_delta_writes_the_predicted_outputs(tiny):
    """With the update applied, the lowest edited map's output at the round's target tokens (whose keys no edit
    changes) moves by exactly K Delta, the solve's prediction; every edited map's output moves by dW k at the keys
    the edited model reads; after the context the base weights are bit-identical again."""
    hp = load_hparams("ultraedit", tiny)
    requests = _requests()
    snap = {n: p.detach().clone() for n, p in tiny.model.named_parameters()}
    result = run_edit(tiny, "ultraedit", requests, hp, solves=True)
    sites = {}
    for l in hp.layers:
        sites[f"key.{l}"] = Site("mlp_key", l)
        sites[f"out.{l}"] = Site("mlp_out", l)
    prompts, targets = [r.rewrite for r in requests], [r.target_new for r in requests]
    b = answer_batch(tiny, prompts, targets)

    def read():
        with torch.no_grad():
            got = tiny.runner.read(sites, input_ids=b["input_ids"], attention_mask=b["attention_mask"])
        return {k: got[k][b["row"], b["pos"]].double() for k in sites}

    before = read()
    with applied(tiny, result.delta):
        after = read()
    low = result.solves[0]
    assert _rel(before[f"key.{low.layer}"], low.keys) < 1e-6
    change = after[f"out.{low.layer}"] - before[f"out.{low.layer}"]
    assert float((change - low.predicted).abs().max()) < 1e-4 * float(low.predicted.abs().max()) + 1e-6
    for s in result.solves:
        k = after[f"key.{s.layer}"]
        moved = after[f"out.{s.layer}"] - k.float().double() @ tiny.adapter.weight("down_proj", s.layer).double().T
        bias = tiny.adapter.bias("down_proj", s.layer)
        if bias is not None:
            moved = moved - bias.double()
        assert float((moved - k @ s.delta.T).abs().max()) < 1e-3 * float((k @ s.delta.T).abs().max()) + 1e-5
    assert all(torch.equal(p, snap[n]) for n, p in tiny.model.named_parameters())


def test_an_edit_raises_the_target(tiny):
    requests = _requests(3)
    prompts, targets = [r.rewrite for r in requests], [r.target_new for r in requests]
    before = [s.logprob for s in score_targets(tiny, prompts, targets)]
    result = run_edit(tiny, "ultraedit", requests)
    with applied(tiny, result.delta):
        after = [s.logprob for s in score_targets(tiny, prompts, targets)]
    assert all(y > x for x, y in zip(before, after)), (before, after)


def test_two_rounds_equal_the_statistics_carried_by_hand(tiny_by_name, tmp_path):
    """A stateful sequence of two rounds (the state from round 1 passed to round 2, computed on round 1's weights)
    gives the updates computed by hand from keys, gradients and statistics merged round after round; and a saved
    and loaded state continues the same way."""
    lm = tiny_by_name("tiny-gpt2")
    hp = load_hparams("ultraedit", lm, {"normalizer": "module"})
    r1, r2 = _requests(2), _requests(3, start=2)
    first = run_edit(lm, "ultraedit", r1, hp)
    with applied(lm, first.delta):
        second = run_edit(lm, "ultraedit", r2, hp, state=first.state)
    stats = {l: RunningStats.empty(lm.adapter.d_ff + lm.adapter.d_model) for l in hp.layers}
    deltas, total = [], {}
    for reqs in (r1, r2):
        with applied(lm, total):
            got = keys_and_gradients(lm, [r.rewrite for r in reqs], [r.target_new for r in reqs], hp.layers)
        delta = {}
        for l in hp.layers:
            stats[l] = stats[l].merged(torch.cat([got["keys"][l], got["grads"][l]], 1))
            delta.update(lm.adapter.weight_delta("down_proj", l, ultraedit_update(
                got["keys"][l], got["grads"][l], stats[l], hp.lr, hp.ridge)["delta"]))
        deltas.append(delta)
        total = {k: total.get(k, 0) + v for k, v in delta.items()}
    for result, delta in zip((first, second), deltas):
        for k in delta:
            torch.testing.assert_close(result.delta[k], delta[k], rtol=1e-5, atol=1e-7)
    for l in hp.layers:
        torch.testing.assert_close(second.state.tensors[f"stats.down_proj.{l}.mean"], stats[l].mean)
    assert second.state.edits == 5 and second.state.meta["batches"] == 2 and first.state.edits == 2
    back = SequenceState.load(first.state.save(tmp_path / "state.safetensors"))
    with applied(lm, first.delta):
        resumed = run_edit(lm, "ultraedit", r2, hp, state=back)
    for k in second.delta:
        torch.testing.assert_close(resumed.delta[k], second.delta[k], rtol=0, atol=0)
    with pytest.raises(EditkitError):  # another method's state, or the other normaliser mid-sequence
        run_edit(lm, "ultraedit", r2, hp, state=SequenceState("alphaedit"))
    with pytest.raises(EditkitError):
        run_edit(lm, "ultraedit", r2, {"normalizer": "shape"}, state=first.state)


def test_bad_hyperparameters(tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    for bad in ({"lr": 0}, {"lr": -1e-3}, {"lr": float("nan")}, {"lr": "big"}, {"lr": True}, {"ridge": 0.0},
                {"forward_batch": 0}, {"forward_batch": 2.5}, {"normalizer": "layer"}, {"layers": []},
                {"layers": [2, 1]}, {"layers": [9]}, {"v_lr": 0.5}, {"source": 3}):
        with pytest.raises(EditkitError):
            load_hparams("ultraedit", lm, bad)
    hp = load_hparams("ultraedit", lm, {"forward_batch": 4.0})
    assert hp.forward_batch == 4 and hp.replace(lr=2e-3).lr == 2e-3
    with pytest.raises(EditkitError):
        hp.replace(ridge=-1)
    one = [{"prompt": "{} is", "subject": "Paris", "target_new": "the"}]  # one one-token target: one row a layer
    with pytest.raises(EditkitError, match="at least two rows"):
        run_edit(lm, "ultraedit", one, {"normalizer": "module"})
    assert run_edit(lm, "ultraedit", one).delta  # the shared (shape) statistics have a row per layer


def test_registered_everywhere(tiny_by_name, tmp_path, capsys):
    """The CLI (`edit`, `evaluate`, `evaluate --sequential`), bench edit and the first-use preparation find
    UltraEdit through the registry; it needs no statistics or templates before its first edit; Gemma 3 270M has
    its defaults."""
    from editkit.cli import build_parser
    from editkit.editing.bench import bench_edit
    from editkit.editing.run import prepare_first_use

    assert "ultraedit" in names() and get("ultraedit").stateful
    lm = tiny_by_name("tiny-neox")
    hp = load_hparams("ultraedit", lm)
    assert first_use(lm, hp) == {} and prepare_first_use(lm, hp) is False and prepare_first_use(lm, [hp]) is False
    assert max(load_hparams("ultraedit", "gemma-3-270m").layers) < 18
    assert build_parser().parse_args(["evaluate"]).methods is None  # None: every registered method
    from editkit.editing.methods import builtin_names
    assert "ultraedit" in builtin_names()  # evaluate's --help lists these without importing the methods
    req = tmp_path / "req.json"
    req.write_text(json.dumps([r.to_dict() for r in _requests(2)]))
    assert main(["edit", "--model", "tiny-neox", "--method", "ultraedit", "--requests", str(req), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "ultraedit" and out["hparams"]["normalizer"] == "shape"
    got = evaluate(lm, ["ultraedit"], EvalSpec(set_name="counterfact", n=2, batch=2, n_gen=0), out_dir=tmp_path)
    assert got.methods["ultraedit"]["records"] == 2
    save = tmp_path / "run.json"
    assert main(["evaluate", "--model", "tiny-neox", "--sequential", "--methods", "ultraedit", "--n", "4",
                 "--batch", "2", "--ppl-tokens", "64", "--fluency-tokens", "5", "--no-cache",
                 "--save", str(save)]) == 0
    assert "UltraEdit" in capsys.readouterr().out
    from editkit.evaluation.lifelong import load_results

    assert set(load_results(save)) == {"ultraedit"}
    bench = bench_edit(lm, n=2, methods=["ultraedit"], say=lambda row: None)
    assert [r["method"] for r in bench["results"]][-1] == "ultraedit" and bench["results"][0]["steps"] == 0


def test_on_the_page():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=600)
    at.session_state["model_choice"] = "tiny-llama"
    at.switch_page("pages/edit_compare.py").run()
    assert not at.exception
    at.multiselect(key="ec_methods").set_value(["ultraedit"])
    at.number_input(key="ec_ngen").set_value(0)
    at.button(key="ec_run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert list(at.session_state["ec_out"].methods) == ["ultraedit"]


# --- acceptance: the port against an independent re-derivation from the paper's equations -----------------------
FFN_OUT = {"tiny-llama": "model.layers.{}.mlp.down_proj", "tiny-gemma3": "model.layers.{}.mlp.down_proj",
           "tiny-gpt2": "transformer.h.{}.mlp.c_proj"}  # the FFN output projection, by its Hugging Face name


def _paper_round(model, tok, requests, names: list[str]) -> dict:
    """Keys k and value gradients g = dL/dy of each named FFN output projection at every target token, with
    L = the mean cross-entropy over all target tokens of the round; one request per forward pass, no padding, the
    module's own hooks (not editkit's runner): name -> (K (n, d_in), G (n, d_out)), float64."""
    mods = dict(model.named_modules())
    rows = [(tok(r.rewrite)["input_ids"], tok(r.target_new, add_special_tokens=False)["input_ids"]) for r in requests]
    total = sum(len(t) for _, t in rows)
    K, G = {n: [] for n in names}, {n: [] for n in names}
    for n in names:
        mods[n].weight.requires_grad_(True)  # a graph through the edited maps, as the reference code makes one
    try:
        for p_ids, t_ids in rows:
            at = list(range(len(p_ids) - 1, len(p_ids) - 1 + len(t_ids)))  # the positions predicting the target
            seen, hooks = {}, []
            for n in names:
                def grab(mod, inp, out, n=n, at=at, seen=seen):
                    seen[n] = [inp[0][0, at].detach().double()]
                    out.register_hook(lambda g, n=n, at=at, seen=seen: seen[n].append(g[0, at].double()))
                hooks.append(mods[n].register_forward_hook(grab))
            logits = model(input_ids=torch.tensor([p_ids + t_ids[:-1]])).logits[0, at]
            loss = torch.nn.functional.cross_entropy(logits.double(), torch.tensor(t_ids), reduction="sum") / total
            loss.backward()
            for h in hooks:
                h.remove()
            for n in names:
                K[n].append(seen[n][0])
                G[n].append(seen[n][1])
    finally:
        for n in names:
            mods[n].weight.requires_grad_(False)
            mods[n].weight.grad = None
    return {n: (torch.cat(K[n]), torch.cat(G[n])) for n in names}


def _paper_update(rounds: list[dict], names: list[str], lr: float, ridge: float) -> dict:
    """The last round's Delta per map (d_in, d_out): z = [k, g] standardised with the mean and standard deviation
    of every row of every round so far and of all maps of this shape (lifelong normalisation), v = -lr ||k_hat||^2
    g_hat, Delta = (K^T K + ridge I)^-1 K^T V over the round's rows."""
    seen = torch.cat([torch.cat(r[n], 1) for r in rounds for n in names])
    mean, std = seen.mean(0), seen.std(0)
    eps = torch.finfo(torch.float32).eps
    out = {}
    for n in names:
        K, G = rounds[-1][n]
        z_hat = (torch.cat([K, G], 1) - mean) / (std + eps)
        k_hat, g_hat = z_hat[:, :K.shape[1]], z_hat[:, K.shape[1]:]
        V = -lr * (k_hat ** 2).sum(1, keepdim=True) * g_hat
        out[n] = torch.linalg.solve(K.T @ K + ridge * torch.eye(K.shape[1], dtype=K.dtype), K.T @ V)
    return out


@pytest.mark.quick
@pytest.mark.parametrize("name", sorted(FFN_OUT))
def test_port_agrees_with_the_papers_update(tiny_by_name, name):
    """Two rounds of UltraEdit (3 then 4 requests, multi-token targets, the running statistics carried) equal the
    update re-derived here from the paper's equations with the model's own modules: the same target tokens, the
    mean loss, the sign and scale of v, every layer's keys read before any layer changes, the second round's keys
    and gradients at the first round's weights and its statistics over both rounds' rows."""
    lm = tiny_by_name(name)
    hp = load_hparams("ultraedit", lm)
    names = [FFN_OUT[name].format(l) for l in hp.layers]
    conv1d = lm.adapter.family.conv1d
    r1, r2 = _requests(3, start=5), _requests(4, start=8)
    assert any(len(lm.tok(r.target_new, add_special_tokens=False)["input_ids"]) > 1 for r in r1 + r2)
    first = run_edit(lm, "ultraedit", r1, hp)
    with applied(lm, first.delta):
        second = run_edit(lm, "ultraedit", r2, hp, state=first.state)
    params = dict(lm.model.named_parameters())
    base = {n: params[n + ".weight"].detach().clone() for n in names}
    rounds = [_paper_round(lm.model, lm.tok, r1, names)]
    want1 = _paper_update(rounds, names, hp.lr, hp.ridge)
    try:
        with torch.no_grad():  # round 2 on the weights round 1 left, written in place and restored below
            for n in names:
                params[n + ".weight"] += (want1[n] if conv1d else want1[n].T).float()
        rounds.append(_paper_round(lm.model, lm.tok, r2, names))
    finally:
        with torch.no_grad():
            for n in names:
                params[n + ".weight"].copy_(base[n])
    want2 = _paper_update(rounds, names, hp.lr, hp.ridge)
    for got, want in ((first, want1), (second, want2)):
        for n in names:
            d = got.delta[n + ".weight"].double()
            assert _rel(d if conv1d else d.T, want[n]) < 2e-5, (n, _rel(d if conv1d else d.T, want[n]))
    assert all(torch.equal(params[n + ".weight"], base[n]) for n in names)
