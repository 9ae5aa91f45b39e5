"""AlphaEdit: the null-space projector, the update of Eq. 14 (its normal equations; Delta K0 = 0 for preserved keys;
MEMIT's update when P = I and lambda C is restored), the sequence state, and the method on every tiny family."""
import pytest
import torch

from editkit.core.errors import EditkitError
from editkit.core.paths import DATA
from editkit.editing.defaults import load_hparams
from editkit.editing.keys import read_sites
from editkit.editing.methods import builtin_names, get, names
from editkit.editing.methods.alphaedit import alphaedit_update, alphaedit_update_in_basis, apply_alphaedit
from editkit.editing.nullspace import eigen, null_dimension, null_space_projector
from editkit.editing.requests import parse_requests
from editkit.editing.run import run_edit
from editkit.editing.sequence import SequenceState
from editkit.editing.spread import batch_update
from editkit.model.weights import applied


def _requests(n=3, start=0):
    return parse_requests(DATA / "counterfact" / "counterfact_500.json")[start:start + n]


def _rel(x, y):
    return float((x - y).abs().max() / y.abs().max().clamp_min(1e-300))


def _problem(seed=0, d=40, d_out=12, n=6, m=9, k=25):
    """A random SPD C with eigenvectors U, the projector onto its k smallest directions, keys, residuals and the
    Gram matrix of m earlier keys."""
    g = torch.Generator().manual_seed(seed)
    U, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))
    e = torch.logspace(-4, 1, d, dtype=torch.float64)  # ascending
    C = U @ torch.diag(e) @ U.T
    P = U[:, :k] @ U[:, :k].T
    K = torch.randn(d, n, generator=g, dtype=torch.float64)
    R = torch.randn(d_out, n, generator=g, dtype=torch.float64)
    Kp = torch.randn(d, m, generator=g, dtype=torch.float64)
    return C, U, P, K, R, Kp @ Kp.T


@pytest.mark.parametrize("alpha", [0.1, 10.0])
def test_update_normal_equations_and_null_space(alpha):
    C, U, P, K, R, prior = _problem()
    D = alphaedit_update(K, R, P, alpha, prior)
    A = K @ K.T + prior
    # Eq. 14 as a linear system: Delta (A P + alpha I) = R K^T P
    lhs = D @ (A @ P + alpha * torch.eye(A.shape[0], dtype=torch.float64))
    assert _rel(lhs, R @ K.T @ P) < 1e-10
    assert _rel(D @ P, D) < 1e-10  # the rows of Delta lie in the null space
    K0 = U[:, 25:] @ torch.randn(15, 7, dtype=torch.float64)  # keys in the preserved span
    assert float((D @ K0).abs().max()) < 1e-10 * float(D.abs().max() * K0.abs().max())
    assert float((D @ K).abs().max()) > 1e-3  # while the edit's own keys move


def test_basis_solve_equals_upstream_solve():
    """The k x k Cholesky solve in the null space's basis gives upstream's d x d solve (with and without P, with
    earlier keys and a preserved term; with fewer keys than directions, the m x m push-through solve)."""
    g = torch.Generator().manual_seed(2)
    C, U, P, K, R, _ = _problem(seed=2)
    Kp = torch.randn(K.shape[0], 5, generator=g, dtype=torch.float64)
    many = torch.randn(K.shape[0], 45, generator=g, dtype=torch.float64)  # more keys than directions: k x k
    for U0, PP in ((U[:, :25], P), (None, None)):
        for prior_keys in (None, Kp, many):
            prior = None if prior_keys is None else prior_keys @ prior_keys.T
            for preserved in (None, 3.0 * C):
                a = alphaedit_update(K, R, PP, 0.5, prior, preserved)
                b = alphaedit_update_in_basis(K, R, U0, 0.5, prior_keys, preserved)
                assert _rel(b, a) < 1e-9


def test_update_reduces_to_memit():
    """P = I, alpha = 0 and the preserved term lambda C restored: MEMIT's Eq. 14; with earlier keys: MEMIT with
    them added to the preserved statistics (upstream's MEMIT_seq)."""
    C, U, P, K, R, prior = _problem(seed=1)
    for lam in (1.0, 1500.0):
        D = alphaedit_update(K, R, None, 0.0, None, lam * C)
        assert _rel(D, batch_update(K, R, C, lam)) < 1e-9
        D = alphaedit_update(K, R, None, 0.0, prior, lam * C)
        assert _rel(D, batch_update(K, R, C + prior / lam, lam)) < 1e-9
        assert _rel(alphaedit_update_in_basis(K, R, None, 0.0, None, lam * C), batch_update(K, R, C, lam)) < 1e-9


def test_null_dimension_rules():
    e = torch.tensor([0.001, 0.01, 0.1, 1.0], dtype=torch.float64)
    assert null_dimension(e, "absolute", 0.05) == 2
    assert null_dimension(e, "relative", 0.05) == 2
    assert null_dimension(e, "relative", 0.005) == 1
    assert null_dimension(e, "energy", 0.01) == 2  # 0.011 <= 0.01 x 1.111
    assert null_dimension(e, "energy", 0.005) == 1
    assert null_dimension(e * 1000, "energy", 0.01) == 2  # scale-free
    assert null_dimension(e * 1000, "absolute", 0.05) == 0  # the upstream rule is not
    with pytest.raises(EditkitError):
        null_dimension(e, "fraction", 0.1)


def test_projector_is_cached_and_projects(tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    hp = load_hparams("alphaedit", lm)
    P, info = null_space_projector(lm, 1, "energy", 0.05, hp.mom2_n_tokens)
    again, info2 = null_space_projector(lm, 1, "energy", 0.05, hp.mom2_n_tokens)
    assert torch.equal(P, again) and info == info2
    assert _rel(P @ P, P) < 1e-10 and _rel(P.T, P) < 1e-12
    k = info["dimension"]
    assert 0 < k < P.shape[0] and abs(float(torch.trace(P)) - k) < 1e-8
    e, U = eigen(lm, 1, hp.mom2_n_tokens)
    assert info["null_energy"] <= 0.05 + 1e-12 and float(e[:k + 1].clamp_min(0).sum() / e.clamp_min(0).sum()) > 0.05


def test_alphaedit_on_every_family(tiny):
    """The method end to end: each layer's solve satisfies its normal equations with the cached projector, keys
    of ordinary text (C's preserved span) are untouched, the weights are never changed, and the state it returns
    holds the keys it used, which are the keys of the edited model."""
    hp = load_hparams("alphaedit", tiny, {"v_num_grad_steps": 3})
    requests = _requests()
    snap = {n: p.detach().clone() for n, p in tiny.model.named_parameters()}
    result = apply_alphaedit(tiny, requests, hp, solves=True)
    assert all(torch.equal(p, snap[n]) for n, p in tiny.model.named_parameters())
    a = tiny.adapter
    assert [d.layer for d in result.solves] == list(hp.layers)
    for d in result.solves:
        P, K, R, D = d.P, d.K.double(), d.R.double(), d.delta
        assert d.prior is None and d.preserved is None
        lhs = D @ (K @ K.T @ P + hp.l2 * torch.eye(P.shape[0], dtype=torch.float64))
        assert _rel(lhs, R @ K.T @ P) < 1e-8
        e, U = eigen(tiny, d.layer, hp.mom2_n_tokens)
        k = int(round(float(torch.trace(P))))
        K0 = U[:, k:]  # every preserved direction
        assert float((D @ K0).abs().max()) < 1e-9 * float(D.abs().max())
        stored = result.delta[a.name("down_proj", d.layer) + ".weight"]
        torch.testing.assert_close(stored.T if a.family.conv1d else stored, D.float(), rtol=0, atol=0)
    state = result.state
    assert state.edits == len(requests) and state.meta["batches"] == 1
    with applied(tiny, result.delta):
        after = read_sites(tiny, requests, hp, {f"K{l}": f"mlp_key.{l}" for l in hp.layers}, {})
    for d in result.solves:
        torch.testing.assert_close(state.keys(d.layer), d.K.float(), rtol=0, atol=0)
        torch.testing.assert_close(after[f"K{d.layer}"], d.K.float(), rtol=1e-5, atol=1e-5)
    assert result.info["null_space"][0]["dimension"] > 0


def test_sequence_state_is_carried(tiny_by_name):
    lm = tiny_by_name("tiny-gemma3")
    hp = load_hparams("alphaedit", lm, {"v_num_grad_steps": 2})
    first = run_edit(lm, "alphaedit", _requests(2), hp)
    with applied(lm, first.delta):
        second = apply_alphaedit(lm, _requests(2, start=2), hp, solves=True, state=first.state)
    for d in second.solves:
        K1 = first.state.keys(d.layer).double()
        torch.testing.assert_close(d.prior, K1 @ K1.T, rtol=0, atol=0)
    assert second.state.edits == 4 and second.state.keys(hp.layers[0]).shape[1] == 4
    assert first.state.edits == 2  # the input state is not changed
    with pytest.raises(EditkitError):
        apply_alphaedit(lm, _requests(1), hp, state=SequenceState("memit"))


def test_sequence_state_round_trip(tmp_path):
    g = torch.Generator().manual_seed(0)
    s = SequenceState("alphaedit").with_keys({3: torch.randn(8, 2, generator=g)}, 2)
    s = s.with_keys({3: torch.randn(8, 3, generator=g)}, 3)
    back = SequenceState.load(s.save(tmp_path / "state.safetensors"))
    assert back.method == "alphaedit" and back.meta == s.meta and back.edits == 5
    assert torch.equal(back.keys(3), s.keys(3))
    with pytest.raises(EditkitError):
        SequenceState.load(tmp_path / "missing.safetensors")


def test_p_off_and_preserved_term_give_memit(tiny_by_name):
    """End to end on Gemma-style and GPT-2-style models: projection off, alpha 0 and MEMIT's lambda C give MEMIT's
    edit (the same targets, keys and spreading)."""
    for name in ("tiny-gpt2", "tiny-gemma3"):
        lm = tiny_by_name(name)
        memit_hp = load_hparams("memit", lm, {"v_num_grad_steps": 3})
        memit = run_edit(lm, "memit", _requests(), memit_hp)
        alpha = run_edit(lm, "alphaedit", _requests(), {"v_num_grad_steps": 3, "projection": False, "l2": 0.0,
                                                        "mom2_update_weight": memit_hp.mom2_update_weight})
        assert set(alpha.delta) == set(memit.delta)
        for k in memit.delta:
            torch.testing.assert_close(alpha.delta[k], memit.delta[k], rtol=1e-4, atol=1e-6)


def test_hparams_checks(tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    for bad in ({"nullspace_rule": "fraction"}, {"nullspace_threshold": 1.5}, {"l2": 0.0}, {"l2": -1.0}):
        with pytest.raises(EditkitError):
            load_hparams("alphaedit", lm, bad)
    assert load_hparams("alphaedit", lm, {"nullspace_rule": "absolute", "nullspace_threshold": 2.0})
    for model in ("gpt2-xl", "EleutherAI/gpt-j-6b", "meta-llama/Meta-Llama-3-8B"):
        hp = load_hparams("alphaedit", model)
        assert hp.nullspace_rule == "absolute" and hp.nullspace_threshold == 0.02 and hp.l2 == 10.0
        assert "jianghoucheng/AlphaEdit" in hp.source


def test_registered_everywhere():
    """The CLI, evaluate and bench read the registry: AlphaEdit is there with no other change."""
    from editkit.cli import build_parser

    assert "alphaedit" in names() and get("alphaedit").stateful
    parser = build_parser()
    args = parser.parse_args(["edit", "--method", "alphaedit", "--requests", "x.json"])
    assert args.method == "alphaedit"
    evaluate = parser.parse_args(["evaluate"])
    assert evaluate.methods is None and "alphaedit" in builtin_names()  # None: every registered method


def test_spectrum_json_cli_and_figure(tiny_by_name, capsys):
    import json

    from editkit.cli import main
    from editkit.editing.spectrum import spectrum
    from editkit.figures.spectrum import spectrum_figure

    lm = tiny_by_name("tiny-llama")
    assert main(["spectrum", "--model", "tiny-llama", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rule"] == "energy" and [r["layer"] for r in out["layers"]] == [1, 2]
    for r in out["layers"]:
        e = r["eigenvalues"]
        assert len(e) == r["width"] == lm.adapter.d_ff and all(a >= b for a, b in zip(e, e[1:]))
        k = r["null_dimension"]
        assert 0 < k < r["width"] and r["null_energy"] <= 0.05 + 1e-12
        assert abs(sum(e[-k:]) / sum(e) - r["null_energy"]) < 1e-9 and e[-k] == r["cut"]
        assert r["upstream_null_dimension"] == sum(v < 0.02 for v in e)
    other = spectrum(lm, [2], "relative", 0.01)
    assert type(other).from_json(other.to_json()) == other and len(other.to_frame()) == 1
    assert other.layers[0].null_dimension == sum(v < 0.01 * max(out["layers"][1]["eigenvalues"])
                                                       for v in out["layers"][1]["eigenvalues"])
    fig = spectrum_figure(out)
    assert len(fig.data) == 4 and fig.layout.yaxis.type == "log"
    assert main(["spectrum", "--model", "tiny-llama", "--rule", "bogus"]) == 2
    assert main(["spectrum", "--model", "tiny-llama", "--layers", "1,x"]) == 2
