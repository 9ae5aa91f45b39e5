"""MEMIT and PMET: the batch solve (MEMIT Eq. 14), the spreading rules (1/(L-i) and PMET's 1/sqrt(L-i)), Gemma's
post-norm mapping, and the apply/revert contract on every tiny family."""
import math

import pytest
import torch

from editkit.core.paths import DATA
from editkit.editing.defaults import load_hparams
from editkit.editing.methods.memit import apply_memit
from editkit.editing.methods.pmet import apply_pmet
from editkit.editing.requests import parse_requests
from editkit.editing.spread import (
    Stream,
    batch_update,
    memit_rule,
    reachable_output,
    residual_to_mlp_output,
    spread,
)
from editkit.editing.stats import cholesky, second_moment
from editkit.model.weights import applied, apply_delta, restore
from test_targets import layer_state


def _requests(n=3):
    return parse_requests(DATA / "counterfact" / "counterfact_500.json")[:n]


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _same(model, snap):
    return all(torch.equal(p, snap[n]) for n, p in model.named_parameters())


def _normal_residual(K, R, C, D, lam):
    """max |Delta (lam C + K K^T) - R K^T| relative to max |R K^T|."""
    K, R, C, D = (x.double() for x in (K, R, C, D))
    rhs = R @ K.T
    return float((D @ (lam * C + K @ K.T) - rhs).abs().max() / rhs.abs().max())


@pytest.mark.parametrize("lam", [1.0, 100.0, 15000.0])
def test_batch_update_normal_equations_random_spd(lam):
    g = torch.Generator().manual_seed(1)
    d_ff, d_model, n = 48, 16, 10
    A = torch.randn(d_ff, 2 * d_ff, generator=g)
    C = A @ A.T / (2 * d_ff)  # SPD, count-normalised like E[k k^T]
    K, R = torch.randn(d_ff, n, generator=g), torch.randn(d_model, n, generator=g)
    D = batch_update(K, R, C, lam)
    assert D.shape == (d_model, d_ff)
    assert _normal_residual(K, R, C, D, lam) < 1e-10
    # with C = identity and lam -> 0 the update maps the keys onto the residuals exactly (n < d_ff)
    D0 = batch_update(K, R, torch.eye(d_ff), 1e-9)
    torch.testing.assert_close(D0 @ K.double(), R.double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["memit", "pmet"])
def test_integration_uses_batch_update_and_keeps_weights(tiny, method):
    hp = load_hparams(method, tiny, {"v_num_grad_steps": 3})
    snap = _snapshot(tiny.model)
    result = (apply_memit if method == "memit" else apply_pmet)(tiny, _requests(), hp, solves=True)
    assert _same(tiny.model, snap)  # bitwise unchanged on return
    lam = hp.mom2_update_weight
    for d in result.solves:
        assert _normal_residual(d.K, d.R, d.C, d.delta, lam) < 1e-6
        # the methods solve with C's cached factor: the same factor gives the same delta bit for bit (a factor
        # computed afresh may differ in the last bit when the cache's was built with another thread count)
        L = cholesky(tiny, d.layer, hp, d.part, d.C)
        again = batch_update(d.K, d.R, d.C, lam, L).to(d.delta.dtype)
        torch.testing.assert_close(again, d.delta, rtol=0, atol=0)
    per_layer = result.info["per_layer"]
    assert [p["layer"] for p in per_layer] == list(hp.layers)
    assert all(p["relative_norm"] > 0 and math.isfinite(p["relative_norm"]) for p in per_layer)
    assert all(len(r["losses"]) >= 1 for r in result.info["requests"])
    backup = apply_delta(tiny.model, result.delta)
    assert not _same(tiny.model, snap)
    restore(tiny.model, backup)
    assert _same(tiny.model, snap)  # revert is bitwise


@pytest.mark.parametrize("sqrt", [False, True])
def test_spreading_rule_first_layer(tiny, sqrt):
    """R at the first critical layer = (target - current) / (L - 0) for MEMIT, / sqrt(L - 0) for PMET."""
    hp = load_hparams("pmet" if sqrt else "memit", tiny)
    requests = _requests(2)
    site = "mlp_out" if sqrt else "resid_post"
    z_layer = hp.layers[-1]
    layer = hp.layers[0]
    state = layer_state(tiny, requests, hp, layer, z_layer, site)  # the values spread reads (tested in test_targets)
    current = state["current"]
    g = torch.Generator().manual_seed(0)
    targets = current + 0.1 * torch.randn(current.shape, generator=g)
    snap = _snapshot(tiny.model)
    C = second_moment(tiny, hp.layers, hp.mom2_n_tokens)
    stream = Stream("down_proj", "mlp_key", site, targets, memit_rule(C, hp.mom2_update_weight))
    done = spread(tiny, requests, hp, [stream], divisor=math.sqrt if sqrt else float, solves=True)
    assert _same(tiny.model, snap)
    n = len(hp.layers)
    want = (targets - current) / (math.sqrt(n) if sqrt else n)
    if site == "resid_post" and tiny.adapter.post_mlp_norm(layer) is not None:
        want = residual_to_mlp_output(tiny, layer, state["mlp"], want)
    torch.testing.assert_close(done.solves[0].R.double(), want.double(), rtol=1e-4, atol=1e-6)


def test_gemma_post_norm_mapping(tiny_by_name):
    """Gemma adds post_feedforward_layernorm(m) = s * m / rms(m) to the residual. The mapping hits every reachable
    residual change exactly, and otherwise lands on the reachable output nearest to the wanted one."""
    lm = tiny_by_name("tiny-gemma3")
    norm = lm.adapter.post_mlp_norm(1)
    assert norm is not None
    original = norm.weight.detach().clone()
    g = torch.Generator().manual_seed(0)
    try:
        with torch.no_grad():  # an uneven scale (a real model's is: Gemma 3 270M's 1 + w spans 0 to 789)
            norm.weight.copy_(torch.rand(norm.weight.shape, generator=g) * 2.8 - 0.8)
        _check_post_norm_mapping(lm, norm, g)
    finally:
        with torch.no_grad():
            norm.weight.copy_(original)


def _check_post_norm_mapping(lm, norm, g):
    d_model = lm.adapter.d_model
    s = (1 + norm.weight.detach().double())
    m = torch.randn(d_model, 4, generator=g)
    with torch.no_grad():
        base = norm(m.T).T.double()
        zero = residual_to_mlp_output(lm, 1, m, torch.zeros_like(m))
        assert float(zero.abs().max()) < 1e-5
        # reachable: any s * u with rms(u) = 1
        u = torch.randn(d_model, 4, generator=g, dtype=torch.float64)
        u = u / u.pow(2).mean(0, keepdim=True).sqrt()
        r = s[:, None] * u - base
        dm = residual_to_mlp_output(lm, 1, m, r)
        achieved = norm((m.double() + dm).float().T).T.double() - base
        torch.testing.assert_close(achieved, r, rtol=0, atol=1e-4 * float(r.abs().max()))
        # unreachable (too long): nothing on the ellipsoid is closer than the mapped output
        big = 3.0 * base + torch.randn(base.shape, generator=g, dtype=torch.float64)
        dm = residual_to_mlp_output(lm, 1, m, big)
        out = norm((m.double() + dm).float().T).T.double()
        err = (out - (base + big)).norm(dim=0)
        U = torch.randn(d_model, 20000, generator=g, dtype=torch.float64)
        U = s[:, None] * (U / U.pow(2).mean(0, keepdim=True).sqrt())
        for j in range(4):
            best_random = (U - (base + big)[:, j:j + 1]).norm(dim=0).min()
            assert float(err[j]) <= float(best_random) * (1 + 1e-5)
        # the old direction-only rule (y rescaled onto the ellipsoid) is never closer
        y = base + big
        scaled = y / (y / s[:, None]).pow(2).mean(0, keepdim=True).sqrt()
        assert bool((err <= (scaled - y).norm(dim=0) * (1 + 1e-5)).all())
        assert bool((err < 0.99 * (scaled - y).norm(dim=0)).any())


def test_reachable_output_lagrange_condition():
    """u = argmin ||s u - y|| s.t. ||u||^2 = d satisfies (s^2 + mu) u = s y for one mu per column."""
    g = torch.Generator().manual_seed(3)
    s = torch.rand(32, generator=g, dtype=torch.float64) * 2 + 0.1
    y = torch.randn(32, 5, generator=g, dtype=torch.float64) * 5
    u = reachable_output(s, y)
    torch.testing.assert_close(u.pow(2).sum(0), torch.full((5,), 32.0, dtype=torch.float64), rtol=1e-9, atol=1e-9)
    mu = (s[:, None] * y / u - s[:, None] ** 2)  # the same value in every row of a column
    assert float((mu - mu.mean(0, keepdim=True)).abs().max()) < 1e-6 * float(mu.abs().max() + 1)


def test_gemma_mapping_survives_dead_norm_channels(tiny_by_name):
    """Gemma 3 270M has post-norm channels with 1 + w = 0; the inversion must stay finite there."""
    lm = tiny_by_name("tiny-gemma3")
    norm = lm.adapter.post_mlp_norm(1)
    original = norm.weight.detach().clone()
    try:
        with torch.no_grad():
            norm.weight[:3] = -1.0
        torch.manual_seed(0)
        m, r = torch.randn(lm.adapter.d_model, 2), 0.1 * torch.randn(lm.adapter.d_model, 2)
        d = residual_to_mlp_output(lm, 1, m, r)
        assert torch.isfinite(d).all()
    finally:
        with torch.no_grad():
            norm.weight.copy_(original)


def test_pmet_mhsa_update_ablation(tiny):
    """update_attn: PMET also writes W_O of every critical layer, each solving the normal equations with W_O's own
    input statistics; the attention output projection really maps its input to the attention output."""
    from editkit.editing.stats import second_moment
    hp = load_hparams("pmet", tiny, {"v_num_grad_steps": 3, "update_attn": True})
    snap = _snapshot(tiny.model)
    result = apply_pmet(tiny, _requests(2), hp, solves=True)
    assert _same(tiny.model, snap)
    a = tiny.adapter
    names = {a.name("o_proj", l) + ".weight" for l in hp.layers} | \
            {a.name("down_proj", l) + ".weight" for l in hp.layers}
    assert set(result.delta) == names
    lam = hp.mom2_update_weight
    attn = [d for d in result.solves if d.part == "o_proj"]
    assert [d.layer for d in attn] == list(hp.layers)
    for d in attn:
        assert _normal_residual(d.K, d.R, d.C, d.delta, lam) < 1e-6
        assert d.C.shape[0] == a.weight("o_proj", d.layer).shape[1]
        stored = result.delta[a.name("o_proj", d.layer) + ".weight"]
        torch.testing.assert_close(stored.T if a.family.conv1d else stored, d.delta.float(), rtol=0, atol=0)
    C = second_moment(tiny, hp.layers, hp.mom2_n_tokens, module="o_proj")
    assert all(torch.allclose(C[l], C[l].T) for l in hp.layers)
    plain = apply_pmet(tiny, _requests(2), hp.replace(update_attn=False))
    assert set(plain.delta) == {a.name("down_proj", l) + ".weight" for l in hp.layers}


def test_encore_terms_in_the_solve_satisfy_their_normal_equations():
    """ENCORE's solve (encore_main.py): Delta (lam C + lambda_n I + K_p K_p^T + K K^T) = R K^T, and with both
    terms off it is MEMIT's Eq. 14 exactly."""
    g = torch.Generator().manual_seed(0)
    d, n, m = 40, 4, 6
    X = torch.randn(3 * d, d, generator=g, dtype=torch.float64)
    C = X.T @ X / (3 * d)
    K, R = torch.randn(d, n, generator=g, dtype=torch.float64), torch.randn(12, n, generator=g, dtype=torch.float64)
    Kp = torch.randn(d, m, generator=g, dtype=torch.float64)
    lam, ridge = 30.0, 2.5
    D = batch_update(K, R, C, lam, ridge=ridge, prior_keys=Kp)
    A = lam * C + ridge * torch.eye(d, dtype=torch.float64) + Kp @ Kp.T + K @ K.T
    assert float((D @ A - R @ K.T).norm() / (R @ K.T).norm()) < 1e-10
    assert torch.equal(batch_update(K, R, C, lam, ridge=0.0, prior_keys=None), batch_update(K, R, C, lam))
    # the ridge shrinks the update (a Frobenius penalty), the earlier keys are written less
    assert D.norm() < batch_update(K, R, C, lam).norm()


def test_memit_with_encore_preserves_the_earlier_batch_keys(tiny):
    """A two-batch sequence with `add_prev_edits`: the second batch's solve at each layer has the first batch's
    keys (the state the first returned) in its preserved set, satisfying ENCORE's normal equations; plain MEMIT
    carries no state."""
    hp = load_hparams("memit", tiny, {"v_num_grad_steps": 3, "update_norm_lambda": 0.5, "add_prev_edits": True})
    first = apply_memit(tiny, _requests(2), hp)
    assert first.state.edits == 2 and all(first.state.keys(l).shape[1] == 2 for l in hp.layers)
    with applied(tiny, first.delta):
        second = apply_memit(tiny, _requests(3)[2:], hp, solves=True, state=first.state)
    assert second.state.edits == 3
    lam = hp.mom2_update_weight
    for s in second.solves:
        Kp = first.state.keys(s.layer).double()
        A = lam * s.C.double() + hp.update_norm_lambda * torch.eye(Kp.shape[0], dtype=torch.float64) \
            + Kp @ Kp.T + s.K.double() @ s.K.double().T
        RK = s.R.double() @ s.K.double().T
        assert float((s.delta.double() @ A - RK).norm() / RK.norm()) < 1e-6
    assert apply_memit(tiny, _requests(2), load_hparams("memit", tiny, {"v_num_grad_steps": 3})).state is None
