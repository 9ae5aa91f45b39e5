"""The cached Cholesky factor of C (stats.cholesky) gives ROME's and MEMIT's updates of the direct solves: ROME's
u = C^-1 k* by two triangular solves, MEMIT's Eq. 14 by the Woodbury identity (an n x n solve per layer and edit
instead of a d x d factorization); the factor is cached beside C and refused (None) for a C that is not positive
definite."""
import torch

from editkit.editing.defaults import load_hparams
from editkit.editing.methods.rome import rome_update
from editkit.editing.spread import batch_update
from editkit.editing.stats import cholesky, key_statistics


def _spd(d: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(4 * d, d, generator=g, dtype=torch.float64)
    return X.T @ X / (4 * d) + 1e-3 * torch.eye(d, dtype=torch.float64)


def _rel(a, b) -> float:
    return float((a - b).norm() / b.norm())


def test_woodbury_equals_the_direct_solve_and_the_normal_equations():
    d, n = 48, 5
    C = _spd(d)
    L = torch.linalg.cholesky(C)
    g = torch.Generator().manual_seed(1)
    K, R = torch.randn(d, n, generator=g, dtype=torch.float64), torch.randn(16, n, generator=g, dtype=torch.float64)
    for lam in (0.5, 1500.0):
        direct, fast = batch_update(K, R, C, lam), batch_update(K, R, C, lam, L)
        assert _rel(fast, direct) < 1e-9
        assert _rel(fast @ (lam * C + K @ K.T), R @ K.T) < 1e-9  # MEMIT's normal equations


def test_rome_with_the_factor_equals_the_direct_solve():
    d = 40
    C = _spd(d, 2)
    g = torch.Generator().manual_seed(3)
    W, k, v = torch.randn(12, d, generator=g), torch.randn(d, generator=g), torch.randn(12, generator=g)
    direct, info = rome_update(W, None, C, k, v)
    fast, info_fast = rome_update(W, None, C, k, v, L=torch.linalg.cholesky(C))
    assert _rel(fast.double(), direct.double()) < 1e-6
    assert _rel(info_fast["u"], info["u"]) < 1e-9
    assert _rel((W.double() + fast.double()) @ k.double(), v.double()) < 1e-5  # W k* = v*


def test_the_factor_is_cached_beside_the_statistics(tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    hp = load_hparams("memit", lm)
    layer = hp.layers[0]
    C = key_statistics(lm, [layer], hp)[layer].double()
    L = cholesky(lm, layer, hp)
    assert L is not None and _rel(L @ L.T, C) < 1e-9
    assert torch.equal(cholesky(lm, layer, hp), L)  # read back from the cache
    shrunk = cholesky(lm, layer, hp.replace(mom2_shrinkage=0.5))  # another estimate, another entry
    assert _rel(shrunk @ shrunk.T, key_statistics(lm, [layer], hp.replace(mom2_shrinkage=0.5))[layer].double()) < 1e-9
