"""Stabilisers as options of the editing methods (ENCORE's early stopping and norm bound, norm-anchor scaling,
the condition-number view, PMET's residual targets): each is off by default and then changes nothing, and when
on it does what it says."""
import pytest
import torch

from editkit.core.paths import DATA
from editkit.editing.defaults import load_hparams
from editkit.editing.requests import parse_requests
from editkit.editing.targets import optimize_targets_batch


def _requests(n=3):
    return parse_requests(DATA / "counterfact" / "counterfact_500.json")[:n]


def _run(lm, hp, sites=("resid_post",), adaptive=False):
    return optimize_targets_batch(lm, _requests(), 2, sites, hp, adaptive=adaptive)


@pytest.mark.parametrize("adaptive", [False, True])
def test_stabilisers_off_is_the_plain_optimisation(tiny_by_name, adaptive):
    """Explicit zeros (off) give the same deltas and losses, bit for bit, as the defaults."""
    lm = tiny_by_name("tiny-llama")
    sites = ("attn_out", "mlp_out") if adaptive else ("resid_post",)
    hp = load_hparams("pmet", lm, {"v_num_grad_steps": 5})
    off = hp.replace(v_stop_top1=0, v_stop_prob=0.0, v_stop_stall=0.0, v_max_norm=0.0)
    a, b = _run(lm, hp, sites, adaptive), _run(lm, off, sites, adaptive)
    for x, y in zip(a, b):
        assert x.losses == y.losses
        for s in sites:
            assert torch.equal(x.at(s).delta, y.at(s).delta)


def test_norm_bound_holds(tiny_by_name):
    lm = tiny_by_name("tiny-gemma3")
    hp = load_hparams("memit", lm, {"v_num_grad_steps": 6, "v_stop_loss": 0.0})
    free = _run(lm, hp)
    bound = 0.5 * min(float(o.at("resid_post").delta.norm()) for o in free)
    for o in _run(lm, hp.replace(v_max_norm=bound)):
        assert float(o.at("resid_post").delta.norm()) <= bound * (1 + 1e-5)
        assert o.held_at_bound  # every free shift was at least twice the bound
    loose = 2 * max(float(o.at("resid_post").delta.norm()) for o in free)
    assert not any(o.held_at_bound for o in _run(lm, hp.replace(v_max_norm=loose)))
    assert all(o.held_at_bound is None and "held_at_bound" not in o.details() for o in free)


def test_an_edit_says_how_many_targets_the_bound_held(tiny_by_name):
    """A bound on the wrong scale looks like an edit that did not take; the result says why."""
    from editkit.editing.run import run_edit

    lm = tiny_by_name("tiny-gemma3")
    requests = _requests(2)
    held = run_edit(lm, "memit", requests, {"v_num_grad_steps": 3, "v_max_norm": 1e-3})
    assert [r.details["held_at_bound"] for r in held.per_request] == [True, True]
    assert "2 of 2 target(s) held at the shift bound" in held.headline()
    rome = run_edit(lm, "rome", requests[:1], {"v_num_grad_steps": 3, "v_max_norm": 1e-3})
    assert rome.per_request[0].details["held_at_bound"] and "1 of 1 target(s) held" in rome.headline()
    assert "shift bound" not in run_edit(lm, "memit", requests, {"v_num_grad_steps": 3}).headline()


def test_early_stop_rules_stop_where_they_say(tiny_by_name):
    """A probability threshold below the first step's stops at step 0 (zero delta); a threshold no request reaches
    runs every step; the most-probable rule stops exactly at the first step with the target top-1 everywhere."""
    lm = tiny_by_name("tiny-llama")
    hp = load_hparams("memit", lm, {"v_num_grad_steps": 8, "v_stop_loss": 0.0, "v_lr": 1.0})
    plain = _run(lm, hp)
    low = _run(lm, hp.replace(v_stop_prob=1e-9))
    for o in low:
        assert len(o.losses) == 1 and o.losses[0]["stopped_by"] == "prob"
        assert float(o.at("resid_post").delta.abs().max()) == 0.0
    high = _run(lm, hp.replace(v_stop_prob=1 - 1e-12))
    assert [len(o.losses) for o in high] == [len(o.losses) for o in plain]
    stall = _run(lm, hp.replace(v_stop_stall=1.0))  # any step that does not halve... lowers by < 100%: step 1
    assert all(len(o.losses) == 2 and o.losses[-1]["stopped_by"] == "stall" for o in stall)
    top1 = _run(lm, hp.replace(v_stop_top1=1))  # tiny random models never make the target top-1 here
    assert [o.losses for o in top1] == [o.losses for o in plain]


def test_an_early_stop_cuts_the_plain_optimisation(tiny_by_name):
    """A request stopped at step k by a stop rule has the delta of the plain optimisation run for k + 1 loss
    evaluations, bit for bit (a stop only truncates the same steps: why a stop rule can be validated by cutting
    one plain trajectory, docs/results/speed.md)."""
    lm = tiny_by_name("tiny-llama")
    hp = load_hparams("memit", lm, {"v_num_grad_steps": 8, "v_stop_loss": 0.0, "v_lr": 1.0})
    reqs = _requests(1)
    stopped = optimize_targets_batch(lm, reqs, 2, ("resid_post",), hp.replace(v_stop_stall=0.5))[0]
    k = len(stopped.losses)
    assert 1 < k < 8 and stopped.losses[-1]["stopped_by"] == "stall"
    cut = optimize_targets_batch(lm, reqs, 2, ("resid_post",), hp.replace(v_num_grad_steps=k))[0]
    assert torch.equal(stopped.at("resid_post").delta, cut.at("resid_post").delta)
    assert [e["loss"] for e in stopped.losses] == [e["loss"] for e in cut.losses]


def test_most_probable_rule_counts_steps_per_request():
    """ENCORE's rule on a batch of two requests (two target tokens each): it stops a request at the n-th step at
    which all its target tokens are the argmax, counted per request across steps."""
    from types import SimpleNamespace

    from editkit.editing.target_stops import Tracker, stabiliser_stops
    rows = SimpleNamespace(t_tok_t=torch.tensor([5, 6, 7, 8]), t_req_t=torch.tensor([0, 0, 1, 1]))
    hp = SimpleNamespace(v_stop_top1=2, v_stop_prob=0.0, v_stop_stall=0.0)
    tracker = Tracker.of(2, torch.device("cpu"))
    loss = torch.ones(2)
    hits = [torch.tensor([5, 6, 7, 0]), torch.tensor([5, 0, 7, 0]), torch.tensor([5, 6, 7, 8])]
    got = [stabiliser_stops(hp, rows, [0, 1], None, a, loss, tracker).tolist() for a in hits]
    assert got == [[False, False], [False, False], [True, False]]
    assert tracker.why[0] == "top1"
    got = stabiliser_stops(hp, rows, [0, 1], None, hits[2], loss, tracker).tolist()
    assert got == [True, True]


def test_condition_number_is_torch_cond():
    from editkit.editing.result import condition_number
    g = torch.Generator().manual_seed(0)
    for shape in ((64, 256), (256, 64), (40, 40)):
        a = torch.randn(*shape, generator=g)
        assert condition_number(a) == pytest.approx(float(torch.linalg.cond(a.double())), rel=1e-9)
    assert condition_number(torch.zeros(3, 5)) == float("inf")


def test_condition_view_off_and_on(tiny_by_name):
    """Off (default): no condition in the report; on: cond(W + dW) of every edited matrix, nothing else changed."""
    from editkit.editing.run import run_edit
    lm = tiny_by_name("tiny-llama")
    hp = {"v_num_grad_steps": 2}
    off = run_edit(lm, "memit", _requests(2), hp)
    on = run_edit(lm, "memit", _requests(2), {**hp, "report_condition": True})
    params = dict(lm.model.named_parameters())
    assert all("condition" not in v for v in off.info["norms"].values())
    for name, d in on.delta.items():
        assert torch.equal(d, off.delta[name])
        want = float(torch.linalg.cond((params[name].detach() + d).double()))
        assert on.norms[name].condition == pytest.approx(want, rel=1e-6)
        assert on.info["norms"][name]["condition"] == on.norms[name].condition


def test_layer_figure_draws_norm_and_condition_per_matrix():
    from editkit.figures.lifelong import layer_curves, layer_figure
    names = ["model.layers.3.mlp.down_proj.weight", "model.layers.2.mlp.down_proj.weight"]
    rows = [{"edit": e, "relative_norm": {n: 0.1 * e for n in names}, "condition": {n: 10.0 + e for n in names}}
            for e in (5, 10)]
    results = {"memit": {"rows": rows}, "rome": {"rows": [{"edit": 5, "relative_norm": {names[0]: 0.3}}]}}
    data = layer_curves(results)
    assert list(data) == names[::-1]  # in layer order
    assert data[names[0]]["rome"]["condition"] == [None]
    fig = layer_figure(results)
    assert len(fig.data) == 2 * 2 + 1  # memit: 2 matrices x 2 panels; rome: its norm only
    assert fig.layout.yaxis.type == "log" and fig.layout.yaxis3.type == "log"


@pytest.mark.parametrize("site", ["mlp_out", "resid_post"])
def test_nas_rescales_value_vectors_to_the_anchor(tiny_by_name, site):
    """NAS: every value vector is rescaled to the anchor norm; for a residual target the value vector is what the
    MLP adds (mlp_write) plus the delta, and the rest of the residual is kept. Off: the same objects back."""
    from editkit.editing.anchor import anchor_targets
    from editkit.editing.keys import site_output
    lm = tiny_by_name("tiny-gemma3")
    hp = load_hparams("memit", lm, {"v_num_grad_steps": 2})
    requests = _requests()
    opts = optimize_targets_batch(lm, requests, 2, (site,), hp)
    assert anchor_targets(lm, requests, opts, site, 2, hp) is opts
    anchor = 3.0
    scaled = anchor_targets(lm, requests, opts, site, 2, hp.replace(nas_anchor=anchor))
    for r, o, s in zip(requests, opts, scaled):
        v = s.at(site).target if site == "mlp_out" else site_output(lm, "mlp_write", 2, r) + s.at(site).delta
        assert float(v.norm()) == pytest.approx(anchor, rel=1e-5)
        assert torch.equal(s.at(site).init, o.at(site).init) and not s.nas.skipped
        torch.testing.assert_close(s.at(site).delta, s.at(site).target - s.at(site).init)
        if site == "resid_post":  # the direction of v0 + delta is kept
            before = site_output(lm, "mlp_write", 2, r) + o.at(site).delta
            torch.testing.assert_close(v / v.norm(), before / before.norm(), rtol=1e-4, atol=1e-5)
    skipped = anchor_targets(lm, requests, opts, site, 2, hp.replace(nas_anchor=anchor, nas_skip_factor=1e-6))
    for s in skipped:
        assert s.nas.skipped and torch.equal(s.at(site).target, s.at(site).init)


def test_rome_with_nas_writes_the_anchor(tiny_by_name):
    """End to end: ROME's v* (its solve's v_star) has the anchor norm, and the report says so."""
    from editkit.editing.run import run_edit
    lm = tiny_by_name("tiny-llama")
    result = run_edit(lm, "rome", _requests(1), {"v_num_grad_steps": 2, "nas_anchor": 2.5}, solves=True)
    assert float(result.solves[0].v_star.norm()) == pytest.approx(2.5, rel=1e-5)
    assert result.per_request[0].details["nas"]["written_norm"] == 2.5


def test_anchor_norm_is_the_mean_of_kept_norms(tiny_by_name):
    from editkit.editing.anchor import anchor_norm
    lm = tiny_by_name("tiny-llama")
    hp = load_hparams("rome", lm, {"v_num_grad_steps": 2})
    got = anchor_norm(lm, _requests(4), 1, "mlp_out", hp, quantile=0.5)
    norms = sorted(got.norms)
    assert got.kept == 2 and got.anchor == pytest.approx((norms[0] + norms[1]) / 2, rel=1e-6)


@pytest.mark.parametrize("method,site", [("rome", "mlp_out"), ("memit", "resid_post")])
def test_anchor_from_edits_equals_the_direct_estimate(tiny_by_name, method, site):
    """`python -m editkit anchor`'s estimate (each request edited alone, ||v*|| read from the reports) is
    anchor_norm's over the same targets: every edit saw the unedited weights, so ROME's sequential stacking never
    enters; a method without the option says so."""
    from editkit.core.errors import EditkitError
    from editkit.editing.anchor import anchor_norm
    from editkit.editing.run import anchor_from_edits
    lm = tiny_by_name("tiny-llama")
    hp = load_hparams(method, lm, {"v_num_grad_steps": 2})
    got = anchor_from_edits(lm, method, _requests(4), {"v_num_grad_steps": 2}, quantile=0.5)
    want = anchor_norm(lm, _requests(4), hp.layers[-1], site, hp, quantile=0.5)
    assert got.norms == pytest.approx(want.norms, rel=1e-4)
    assert got.kept == want.kept == 2 and got.anchor == pytest.approx(want.anchor, rel=1e-4)
    opts = optimize_targets_batch(lm, _requests(4), hp.layers[-1], (site,), hp)
    assert got.shift_norms == pytest.approx([float(o.at(site).delta.norm()) for o in opts], rel=1e-4)
    with pytest.raises(EditkitError, match="no norm-anchor option"):
        anchor_from_edits(lm, "ultraedit", _requests(1))


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_pmet_residual_target_is_the_residual_of_its_mlp_target(tiny_by_name, name):
    """z = h_L + n(m*) - n(m) is exactly the block output at layer L when the MLP output at L is m* (the delta
    added to the MLP's output on the plain prompt), through Gemma's post-MLP norm too."""
    from editkit.editing.keys import subject_last
    from editkit.editing.methods.pmet import residual_targets
    from editkit.model.sites import site
    lm = tiny_by_name(name)
    hp = load_hparams("pmet", lm, {"v_num_grad_steps": 3})
    requests = _requests(2)
    opts = optimize_targets_batch(lm, requests, 2, ("attn_out", "mlp_out"), hp, adaptive=True)
    z = residual_targets(lm, requests, opts, 2)
    for j, (r, o) in enumerate(zip(requests, opts)):
        idx = subject_last(lm.tok, r.rewrite, r.subject, 0)
        ids = lm.tok(r.rewrite, return_tensors="pt")["input_ids"]
        delta = o.at("mlp_out").delta

        def edit(hooks):
            def add(h):
                h = h.clone()
                h[0, idx] = h[0, idx] + delta.to(h.dtype)
                return h
            hooks.set(site("mlp_out", 2), add)

        where = site("resid_post", 2)
        h = lm.runner.read([where], edit=edit, input_ids=ids)[where.name][0, idx].float()
        torch.testing.assert_close(z[:, j], h, rtol=1e-4, atol=1e-4)


def test_pmet_residual_option_edits(tiny_by_name):
    """The option runs end to end and changes the update; off is the faithful rule (the default)."""
    from editkit.editing.run import run_edit
    lm = tiny_by_name("tiny-gemma3")
    hp = {"v_num_grad_steps": 2}
    plain = run_edit(lm, "pmet", _requests(2), hp)
    again = run_edit(lm, "pmet", _requests(2), {**hp, "residual_targets": False})
    resid = run_edit(lm, "pmet", _requests(2), {**hp, "residual_targets": True})
    for name, d in plain.delta.items():
        assert torch.equal(d, again.delta[name])
        assert not torch.equal(d, resid.delta[name]) and bool(resid.delta[name].isfinite().all())
    assert all(r.reached is not None for r in resid.per_request)
