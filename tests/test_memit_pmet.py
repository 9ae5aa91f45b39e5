"""MEMIT and PMET: the batch solve (MEMIT Eq. 14), the spreading rules (1/(L-i) and PMET's 1/sqrt(L-i)), Gemma's
post-norm mapping, and the apply/revert contract on every tiny family."""
import math

import pytest
import torch

from editkit.editing.hparams import load_hparams
from editkit.editing.memit import apply_memit, batch_update, residual_to_mlp_output, spread
from editkit.editing.pmet import apply_pmet
from editkit.editing.requests import parse_requests
from editkit.editing.targets import site_output
from editkit.editing.weights import apply_delta, restore
from editkit.paths import DATA


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
    debug = []
    result = (apply_memit if method == "memit" else apply_pmet)(tiny, _requests(), hp, debug=debug)
    assert _same(tiny.model, snap)  # bitwise unchanged on return
    lam = hp["mom2_update_weight"]
    for d in debug:
        assert _normal_residual(d["K"], d["R"], d["C"], d["delta"], lam) < 1e-6
        again = batch_update(d["K"], d["R"], d["C"], lam).to(d["delta"].dtype)
        torch.testing.assert_close(again, d["delta"], rtol=0, atol=0)
    per_layer = result.info["per_layer"]
    assert [p["layer"] for p in per_layer] == hp["layers"]
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
    site = "mlp" if sqrt else "block"
    z_layer = hp["layers"][-1]
    current = torch.stack([site_output(tiny, site, z_layer, r) for r in requests], 1)
    g = torch.Generator().manual_seed(0)
    targets = current + 0.1 * torch.randn(current.shape, generator=g)
    snap = _snapshot(tiny.model)
    debug = []
    spread(tiny, requests, hp, targets, site, sqrt=sqrt, method="test", debug=debug)
    assert _same(tiny.model, snap)
    n = len(hp["layers"])
    want = (targets - current) / (math.sqrt(n) if sqrt else n)
    layer = hp["layers"][0]
    if site == "block" and tiny.adapter.post_mlp_norm(layer) is not None:
        m = torch.stack([site_output(tiny, "mlp", layer, r) for r in requests], 1)
        want = residual_to_mlp_output(tiny, layer, m, want)
    torch.testing.assert_close(debug[0]["R"].double(), want.double(), rtol=1e-4, atol=1e-6)


def test_gemma_post_norm_mapping(tiny_by_name):
    """post_feedforward_layernorm(m + d) points exactly along norm(m) + r
    (the reachable part of the residual target r)."""
    lm = tiny_by_name("tiny-gemma3")
    norm = lm.adapter.post_mlp_norm(1)
    assert norm is not None
    g = torch.Generator().manual_seed(0)
    m = torch.randn(lm.adapter.d_model, 4, generator=g)
    with torch.no_grad():
        base = norm(m.T).T.double()
        zero = residual_to_mlp_output(lm, 1, m, torch.zeros_like(m))
        assert float(zero.abs().max()) < 1e-5
        r = 1e-3 * base.norm(dim=0) * torch.randn(m.shape, generator=g).double() / math.sqrt(m.shape[0])
        d = residual_to_mlp_output(lm, 1, m, r)
        achieved = norm((m.double() + d).float().T).T.double() - base
        # The normed output always has rms(out / (1 + w)) = 1 (an ellipsoid), so a residual r is reachable only up
        # to that rescaling: the mapping gives y / rms(y / (1 + w)) with y = norm(m) + r (direction exact).
        y = base + r
        scale = (1 + norm.weight.double())[:, None]
        want = y / torch.sqrt((y / scale).pow(2).mean(0, keepdim=True)) - base
        torch.testing.assert_close(achieved, want, rtol=0, atol=1e-3 * float(r.abs().max()))
        big = 0.5 * base
        d = residual_to_mlp_output(lm, 1, m, big)
        out = norm((m.double() + d).float().T).T.double()
        cos = torch.nn.functional.cosine_similarity(out, base + big, dim=0)
        assert float(cos.min()) > 1 - 1e-5


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
