"""The target optimisation shared by ROME, MEMIT, PMET and AlphaEdit: the cached fast path (prefix key/value cache,
only the blocks from the edit layer up, only the suffix tokens) gives the same logits as running the whole model,
and a batch of requests optimizes exactly like the requests one by one; keys and sites read as one by one."""
import pytest
import torch

from editkit.core.paths import DATA
from editkit.editing.defaults import load_hparams
from editkit.editing.joint import Joint
from editkit.editing.requests import parse_requests
from editkit.editing.target_rows import TargetRows
from editkit.editing.targets import optimize_targets, optimize_targets_batch


def _requests(n=3):
    return parse_requests(DATA / "counterfact" / "counterfact_500.json")[:n]


@pytest.mark.parametrize("sites", [("resid_post",), ("mlp_out",), ("attn_out", "mlp_out")])
def test_fast_logits_equal_full_model(tiny, sites):
    hp = load_hparams("memit", tiny)
    rows = TargetRows(tiny, _requests(), 1, sites, hp)
    g = torch.Generator().manual_seed(0)
    deltas = {s: torch.randn(3, tiny.adapter.d_model, generator=g) for s in sites}
    init_fast, init_ref = {}, {}
    with torch.no_grad():
        fast = rows.logits(deltas, init=init_fast)
        ref = rows.logits(deltas, init=init_ref, reference=True)
        again = rows.logits(deltas)  # the cache is rewound between passes
    for a, b in zip(fast, ref):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    for s in sites:
        torch.testing.assert_close(init_fast[s], init_ref[s], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(again[0], fast[0], rtol=0, atol=0)
    # the deltas matter: zero deltas give other logits
    zero = rows.logits({s: torch.zeros_like(d) for s, d in deltas.items()})
    assert (zero[0] - fast[0]).abs().max() > 1e-3


@pytest.mark.parametrize("sites", [("resid_post",), ("mlp_out",)])
def test_rows_at_several_layers_equal_full_model(tiny, sites):
    """Requests at different layers in one batch (a layer sweep): each layer's rows join at their block, and the
    logits and the captured site outputs equal the whole model's with each delta at its own layer."""
    hp = load_hparams("memit", tiny)
    L = tiny.adapter.n_layers
    requests = _requests(2) * 2
    layers = [L - 1, 0, 1, 0]
    rows = TargetRows(tiny, requests, layers, sites, hp)
    g = torch.Generator().manual_seed(1)
    deltas = {s: torch.randn(4, tiny.adapter.d_model, generator=g) for s in sites}
    init_fast, init_ref = {}, {}
    with torch.no_grad():
        fast = rows.logits(deltas, init=init_fast)
        ref = rows.logits(deltas, init=init_ref, reference=True)
    for a, b in zip(fast, ref):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    for s in sites:
        torch.testing.assert_close(init_fast[s], init_ref[s], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-gpt2"])
def test_a_layer_sweep_in_one_batch_equals_layer_by_layer(tiny_by_name, name):
    lm = tiny_by_name(name)
    hp = load_hparams("rome", lm, {"v_num_grad_steps": 5})
    request = _requests(1)[0]
    layers = list(range(lm.adapter.n_layers))
    batch = optimize_targets_batch(lm, [request] * len(layers), layers, ("mlp_out",), hp)
    for l, b in zip(layers, batch):
        alone = optimize_targets(lm, request, l, ("mlp_out",), hp)
        assert len(alone.losses) == len(b.losses)
        torch.testing.assert_close(alone.at("mlp_out").init, b.at("mlp_out").init, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(alone.at("mlp_out").delta, b.at("mlp_out").delta, rtol=1e-3, atol=1e-4)


def test_fast_gradients_equal_full_model(tiny_by_name):
    lm = tiny_by_name("tiny-gemma3")
    rows = TargetRows(lm, _requests(2), 2, ("mlp_out",), load_hparams("rome", lm))
    grads = []
    for reference in (False, True):
        d = {"mlp_out": torch.zeros(2, lm.adapter.d_model, requires_grad=True)}
        with torch.enable_grad():
            rw, kl = rows.logits(d, reference=reference)
            (torch.log_softmax(rw, -1)[:, 7].sum() + kl.logsumexp(-1).sum()).backward()
        grads.append(d["mlp_out"].grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
@pytest.mark.parametrize("adaptive", [False, True])
def test_batch_equals_one_by_one(tiny_by_name, name, adaptive):
    lm = tiny_by_name(name)
    hp = load_hparams("pmet", lm, {"v_num_grad_steps": 6})
    sites = ("attn_out", "mlp_out") if adaptive else ("resid_post",)
    requests = _requests(3)
    batch = optimize_targets_batch(lm, requests, 2, sites, hp, adaptive=adaptive)
    for request, b in zip(requests, batch):
        alone = optimize_targets(lm, request, 2, sites, hp, adaptive=adaptive)
        assert len(alone.losses) == len(b.losses)
        for s in sites:
            torch.testing.assert_close(alone.at(s).delta, b.at(s).delta, rtol=1e-3, atol=1e-4)
            assert float(b.at(s).delta.norm()) <= hp.clamp_norm_factor * float(b.at(s).init.norm()) * (1 + 1e-5)


def test_requests_leave_the_batch_when_they_stop(tiny_by_name):
    """Early stopping is per request: with the stopping threshold between the requests' initial losses, the easiest
    request stops at step 0 with a zero delta while the others go on exactly as they would alone."""
    lm = tiny_by_name("tiny-llama")
    requests = _requests(3)
    hp = load_hparams("memit", lm, {"v_num_grad_steps": 5})
    first = [optimize_targets(lm, r, 2, ("resid_post",), hp.replace(v_num_grad_steps=1)).losses[0]["loss"]
             for r in requests]
    order = sorted(range(3), key=lambda j: first[j])
    hp = hp.replace(v_stop_loss=(first[order[0]] + first[order[1]]) / 2)
    out = optimize_targets_batch(lm, requests, 2, ("resid_post",), hp)
    easy = order[0]
    assert len(out[easy].losses) == 1
    assert float(out[easy].at("resid_post").delta.abs().max()) == 0.0
    assert all(len(out[j].losses) > 1 for j in order[1:])
    for j in order[1:]:
        alone = optimize_targets(lm, requests[j], 2, ("resid_post",), hp)
        assert len(alone.losses) == len(out[j].losses)
        torch.testing.assert_close(alone.at("resid_post").delta, out[j].at("resid_post").delta, rtol=1e-3, atol=1e-4)


def layer_state(lm, requests, hp, layer: int, z_layer: int, kind: str) -> dict:
    """What MEMIT reads at one critical layer, in one batched read (keys.read_sites): "K" the template-averaged
    keys at `layer`, "current" the site `kind` at z_layer and "mlp" the MLP output at `layer`."""
    from editkit.editing.keys import read_sites
    from editkit.model.sites import Site, site

    return read_sites(lm, requests, hp, {"K": Site("mlp_key", layer)},
                      {"current": site(kind, z_layer), "mlp": Site("mlp_out", layer)})


def test_layer_state_matches_one_by_one(tiny):
    from editkit.editing.keys import key_star, site_output
    hp = load_hparams("memit", tiny)
    requests = _requests(3)
    for site in ("resid_post", "mlp_out"):
        state = layer_state(tiny, requests, hp, 1, 2, site)
        K = torch.stack([key_star(tiny, 1, r, hp) for r in requests], 1)
        current = torch.stack([site_output(tiny, site, 2, r) for r in requests], 1)
        m = torch.stack([site_output(tiny, "mlp_out", 1, r) for r in requests], 1)
        torch.testing.assert_close(state["K"], K, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(state["current"], current, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(state["mlp"], m, rtol=1e-4, atol=1e-4)


def test_fused_loss_terms_equal_full_softmax(tiny):
    """The one-pass vocabulary terms (vocab.vocab_logsumexp: log p of each target token, its argmax, the KL to the
    first step's distribution) equal the softmax over full logits, values and gradients, on every family."""
    from editkit.editing.targets import KlReference, loss_terms
    from editkit.model.vocab import vocab_logsumexp

    hp = load_hparams("memit", tiny)
    rows = TargetRows(tiny, _requests(3), 1, ("resid_post",), hp)
    d = tiny.adapter.d_model
    # every tiny family takes the fast path but Gemma 2, whose capped logits are not affine in x (the full logits)
    assert (vocab_logsumexp(tiny, torch.zeros(2, d)) is None) == bool(tiny.adapter.final_softcap)
    act = torch.arange(3)
    kl_fast, kl_full = KlReference(), KlReference()
    zero = {"resid_post": torch.zeros(3, d)}
    loss_terms(tiny, rows, zero, None, False, kl_fast, act)  # the first step keeps P_orig
    loss_terms(tiny, rows, zero, None, True, kl_full, act)
    g = torch.Generator().manual_seed(0)
    delta = torch.randn(3, d, generator=g) * 3
    out = []
    for reference, kl0 in ((False, kl_fast), (True, kl_full)):
        x = {"resid_post": delta.clone().requires_grad_(True)}
        with torch.enable_grad():
            logp, argmax, kl = loss_terms(tiny, rows, x, None, reference, kl0, act)
            (logp.sum() + 0.3 * kl.sum()).backward()
        out.append((logp.detach(), argmax, kl.detach(), x["resid_post"].grad))
    (lp_f, am_f, kl_f, g_f), (lp_d, am_d, kl_d, g_d) = out
    torch.testing.assert_close(lp_f, lp_d, rtol=1e-4, atol=1e-4)
    assert torch.equal(am_f, am_d)
    assert float(kl_d.min()) > 1e-3  # the deltas moved the distributions
    torch.testing.assert_close(kl_f, kl_d, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(g_f, g_d, rtol=1e-3, atol=1e-4)
    assert float(g_f.abs().max()) > 0


def test_site_reader_resumes_exactly(tiny):
    """SiteReader: a read after an edit at layer l >= the kept layer runs only blocks l.. and gives what a fresh
    full forward at those weights gives."""
    from editkit.editing.keys import SiteReader, read_sites
    from editkit.model.weights import applied

    hp = load_hparams("memit", tiny)
    requests = _requests(3)
    reader = SiteReader(tiny, requests, hp)
    first = reader.read({"K": "mlp_key.1"}, {"z": "resid_post.2"}, resume_at=1)
    torch.testing.assert_close(first["K"], read_sites(tiny, requests, hp, {"K": "mlp_key.1"}, {})["K"],
                               rtol=0, atol=0)
    a = tiny.adapter
    g = torch.Generator().manual_seed(1)
    dW = torch.randn(a.weight("down_proj", 1).shape, generator=g) * 0.5
    with applied(tiny, a.weight_delta("down_proj", 1, dW)):
        again = reader.read({"K": "mlp_key.2"}, {"z": "resid_post.2", "m": "mlp_out.1"}, resume_at=2)
        fresh = read_sites(tiny, requests, hp, {"K": "mlp_key.2"}, {"z": "resid_post.2", "m": "mlp_out.1"})
    for k in fresh:
        torch.testing.assert_close(again[k], fresh[k], rtol=1e-5, atol=1e-5)
    assert (again["z"] - first["z"]).abs().max() > 1e-4  # the edit is seen


def test_a_request_tied_to_its_copy_optimizes_as_it_does_alone(tiny_by_name):
    """A shared delta is optimized on the summed loss of its requests: two copies of one request sum to twice its
    loss, and Adam's step does not depend on the gradient's scale (up to its eps), so the pair's one delta is the
    request's own, step for step."""
    lm = tiny_by_name("tiny-llama")
    hp = load_hparams("memit", lm, {"v_num_grad_steps": 6})
    r = _requests(1)[0]
    pair = optimize_targets_batch(lm, [r, r], 2, ("resid_post",), hp, joint=Joint((0, 0)))
    alone = optimize_targets(lm, r, 2, ("resid_post",), hp)
    assert len(pair[0].losses) == len(alone.losses) == len(pair[1].losses)
    for p in pair:
        torch.testing.assert_close(p.at("resid_post").delta, alone.at("resid_post").delta, rtol=1e-3, atol=1e-4)


def test_tied_requests_share_one_delta_that_serves_both(tiny_by_name):
    """Two facts about one subject (a rewrite and an implication) tied: one delta, the same for both, unlike either
    one's own; the other requests of the batch optimize as they would alone; a tie must name an owner."""
    from editkit.core.errors import EditkitError
    from editkit.editing.requests import EditRequest

    lm = tiny_by_name("tiny-llama")
    hp = load_hparams("memit", lm, {"v_num_grad_steps": 4})
    a, other = _requests(2)
    b = EditRequest("The country where {} is found is", a.subject, " Italy")
    out = optimize_targets_batch(lm, [a, other, b], 2, ("resid_post",), hp, joint=Joint((0, 1, 0)))
    assert torch.equal(out[0].at("resid_post").delta, out[2].at("resid_post").delta)
    for j, r in ((0, a), (2, b)):
        own = optimize_targets(lm, r, 2, ("resid_post",), hp).at("resid_post").delta
        assert float((own - out[j].at("resid_post").delta).abs().max()) > 1e-3
    alone = optimize_targets(lm, other, 2, ("resid_post",), hp)
    torch.testing.assert_close(out[1].at("resid_post").delta, alone.at("resid_post").delta, rtol=1e-3, atol=1e-4)
    for bad in [(0, 1), (1, 1, 0), (2, 1, 0)]:
        with pytest.raises(EditkitError, match="tie"):
            optimize_targets_batch(lm, [a, other, b], 2, ("resid_post",), hp, joint=Joint(bad))


def test_a_request_weighted_zero_in_a_shared_delta_leaves_it_the_owners_own(tiny_by_name):
    """`weights` scale each request's loss in its shared delta's sum: weight 0 takes a member out of the gradient
    (the delta is the owner's alone, step for step, when no early stop ends either), weight 1 is no weight."""
    from editkit.core.errors import EditkitError
    from editkit.editing.requests import EditRequest

    lm = tiny_by_name("tiny-llama")
    hp = load_hparams("memit", lm, {"v_num_grad_steps": 5, "v_stop_loss": 0.0})
    a = _requests(1)[0]
    b = EditRequest("The country where {} is found is", a.subject, " Italy")
    zero = optimize_targets_batch(lm, [a, b], 2, ("resid_post",), hp, joint=Joint((0, 0), (1.0, 0.0)))
    alone = optimize_targets(lm, a, 2, ("resid_post",), hp)
    torch.testing.assert_close(zero[0].at("resid_post").delta, alone.at("resid_post").delta, rtol=1e-4, atol=1e-5)
    ones = optimize_targets_batch(lm, [a, b], 2, ("resid_post",), hp, joint=Joint((0, 0), (1.0, 1.0)))
    plain = optimize_targets_batch(lm, [a, b], 2, ("resid_post",), hp, joint=Joint((0, 0)))
    assert torch.equal(ones[0].at("resid_post").delta, plain[0].at("resid_post").delta)
    assert float((plain[0].at("resid_post").delta - alone.at("resid_post").delta).abs().max()) > 1e-3
    with pytest.raises(EditkitError, match="weights"):
        optimize_targets_batch(lm, [a, b], 2, ("resid_post",), hp, joint=Joint((0, 0), (1.0,)))


def test_a_member_that_does_not_hold_the_stop_never_keeps_its_group_running(tiny_by_name):
    """Joint.holds: a member whose stopping rule does not hold its group (co-edit's kept relations) pulls on the
    delta but the group stops when its owner's rule holds. Weighted 0 and not holding, a member the owner's target
    contradicts (same prompt, another answer) leaves the owner's run exactly as alone, stop included; holding, it
    keeps the group running to the last step."""
    from editkit.core.errors import EditkitError
    from editkit.editing.requests import EditRequest

    lm = tiny_by_name("tiny-llama")
    a = _requests(1)[0]
    b = EditRequest(a.prompt, a.subject, " Italy")
    free = optimize_targets(lm, a, 2, ("resid_post",), load_hparams("memit", lm, {"v_stop_loss": 0.0})).losses
    stop = (free[2]["loss"] + free[3]["loss"]) / 2  # the owner alone stops after 4 steps
    hp = load_hparams("memit", lm, {"v_num_grad_steps": 10, "v_stop_loss": stop})
    alone = optimize_targets(lm, a, 2, ("resid_post",), hp)
    soft = optimize_targets_batch(lm, [a, b], 2, ("resid_post",), hp, joint=Joint((0, 0), (1.0, 0.0), (True, False)))
    hard = optimize_targets_batch(lm, [a, b], 2, ("resid_post",), hp, joint=Joint((0, 0), (1.0, 0.0)))
    assert len(alone.losses) == len(soft[0].losses) == len(soft[1].losses) == 4
    assert min(x["loss"] for x in hard[1].losses) > stop  # b never meets its rule ...
    assert len(hard[0].losses) == 10  # ... so, holding, it runs the group to the end
    torch.testing.assert_close(soft[0].at("resid_post").delta, alone.at("resid_post").delta, rtol=1e-4, atol=1e-5)
    assert torch.equal(soft[0].at("resid_post").delta, soft[1].at("resid_post").delta)
    with pytest.raises(EditkitError, match="holds"):
        optimize_targets_batch(lm, [a, b], 2, ("resid_post",), hp, joint=Joint((0, 0), None, (False, True)))


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-gpt2", "tiny-gemma2"])
def test_a_layer_sweep_runs_its_identical_rows_once_with_the_same_results(tiny_by_name, name, monkeypatch):
    """TargetRows runs the rows of a request repeated at every layer once (target_rows.SHARE_ROWS; the context
    templates' rows, not the KL rows, whose shared run would be too small to keep the matmul's bits:
    SHARE_MIN_POSITIONS): the same logits and optimised targets as each row run on its own, bit for bit, with
    fewer rows run."""
    from editkit.editing import target_rows

    lm = tiny_by_name(name)
    hp = load_hparams("rome", lm, {"v_num_grad_steps": 4})
    request = _requests(1)[0]
    layers = list(range(lm.adapter.n_layers))
    ran = []
    real = lm.runner.forward

    def counting(**kw):
        ran.append(int((kw.get("input_ids") if kw.get("input_ids") is not None else kw["inputs_embeds"]).shape[0]))
        return real(**kw)
    monkeypatch.setattr(lm.runner, "forward", counting)
    out = {}
    for share in (True, False):
        monkeypatch.setattr(target_rows, "SHARE_ROWS", share)
        ran.clear()
        rows = TargetRows(lm, [request] * len(layers), layers, ("mlp_out",), hp)
        g = torch.Generator().manual_seed(0)
        deltas = {"mlp_out": torch.randn(len(layers), lm.adapter.d_model, generator=g)}
        with torch.no_grad():
            out[share] = (rows.logits(deltas), sum(ran),
                          optimize_targets_batch(lm, [request] * len(layers), layers, ("mlp_out",), hp))
    (shared, n_shared, t_shared), (alone, n_alone, t_alone) = out[True], out[False]
    assert n_shared < n_alone / 2
    assert all(torch.equal(a, b) for a, b in zip(shared, alone))
    for a, b in zip(t_shared, t_alone):
        assert a.losses == b.losses and torch.equal(a.at("mlp_out").target, b.at("mlp_out").target)
