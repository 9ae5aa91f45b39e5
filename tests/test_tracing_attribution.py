"""The preview (attribution patching): its linear term equals a finite-difference derivative (float64 tiny models),
it agrees in sign and order with the exact map where the first order holds (small noise), windows are sums of
layers, and Spearman's rank correlation is right."""
import numpy as np
import pytest
import torch

from editkit.model.adapters import adapter_for
from editkit.model.hooks import Hooks
from editkit.model.lm import LM
from editkit.model.loading import _tiny
from editkit.model.sites import site
from editkit.tracing import Tracer, TraceSetup, TraceSpec, fast_trace, parse_noise
from editkit.tracing.attribution import attribution, spearman
from editkit.tracing.setup import corrupt_embeddings, window_layers

PROMPT, SUBJECT = "The Space Needle is in downtown Seattle", "Space Needle"


@pytest.fixture
def lm64(request, tmp_path, monkeypatch):
    """A tiny model in float64, so that finite differences are accurate to ~1e-9."""
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    name = getattr(request, "param", "tiny-llama")
    model, tok = _tiny(name)
    model = model.double().eval()
    return LM(f"{name}-float64", model, tok, adapter_for(model))


def _p(lm, s, edits=(), corrupted=True) -> float:
    """Mean p(answer) over the corrupted runs (or the clean run) with additive changes [(site, token, vector)]."""
    rows = s.n if corrupted else 1
    with torch.no_grad(), Hooks(lm) as hooks:
        if corrupted:
            hooks.set("embed", corrupt_embeddings(s))
        for where, token, vec in edits:
            def fn(h, token=token, vec=vec):
                h = h.clone()
                h[:, token] += vec
                return h
            hooks.set(where, fn)
        h = lm.runner.hidden(input_ids=s.input_ids.repeat(rows, 1))
        return float(torch.softmax(lm.runner.logits(h[:, -1], norm=False), -1)[:, s.answer_id].mean())


def _derivative(lm, s, kind, token, layers, corrupted=True, eps=1e-4) -> float:
    """d/de of the mean p when every state (kind, layer in layers) at `token` moves by e (a_clean - a_corrupt),
    by central differences."""
    def at(e):
        edits = []
        for l in layers:
            name = site(kind, l).name
            target = s.corrupt[name][:, token] if corrupted else s.corrupt[name][:, token].mean(0)
            edits.append((site(kind, l), token, e * (s.clean[name][0, token] - target)))
        return _p(lm, s, edits, corrupted)
    return (at(eps) - at(-eps)) / (2 * eps)


# Llama's and Gemma 3's RMSNorm and GPT-J's attention compute in float32 even in a float64 model, which puts ~1e-7
# relative noise on p: too much for a finite difference. GPT-2 and NeoX (LayerNorm) run in float64 throughout; the
# gradient code is the same for every family.
@pytest.mark.parametrize("lm64", ["tiny-gpt2", "tiny-neox"], indirect=True)
@pytest.mark.parametrize("method", ["corrupted", "clean"])
def test_estimate_equals_finite_differences(lm64, method):
    s = TraceSetup.build(lm64, TraceSpec(PROMPT, SUBJECT, samples=3))
    L, (b, e) = lm64.adapter.n_layers, s.subject_range
    window = 2
    est = attribution(lm64, s, window=window, method=method)
    checked = 0
    for kind in ("hidden", "mlp", "attn"):
        for token in (b, e - 1, len(s.tokens) - 1):
            for l in (0, L // 2, L - 1):
                layers = [l] if kind == "hidden" else list(window_layers(l, window, L))
                fd = _derivative(lm64, s, kind, token, layers, corrupted=method == "corrupted")
                got = float(est[kind][token, l]) - s.low_score
                assert abs(got - fd) <= 1e-6 + 1e-5 * abs(fd), (kind, token, l, got, fd)
                checked += abs(fd) > 1e-6
    assert checked >= 10  # the derivatives checked are not all zero


def test_the_kept_forward_gives_the_same_estimate(tiny_by_name):
    """TraceSetup.build(gradients=True) keeps the corrupted pass for the preview's backward: same setup, same
    estimate."""
    lm = tiny_by_name("tiny-gemma3")
    plain = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=3))
    kept = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=3), gradients=True)
    assert kept.corrupt_graph is not None and kept.low_score == pytest.approx(plain.low_score, abs=1e-7)
    for name, value in plain.corrupt.items():
        assert torch.equal(kept.corrupt[name], value) and not kept.corrupt[name].requires_grad
    a, b = attribution(lm, plain), attribution(lm, kept)
    assert kept.corrupt_graph is None  # used once, then freed
    for kind in a:
        torch.testing.assert_close(a[kind], b[kind], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(fast_trace(lm, kept, "mlp", window=2), fast_trace(lm, plain, "mlp", window=2))


def test_mean_method_is_the_average(lm64):
    s = TraceSetup.build(lm64, TraceSpec(PROMPT, SUBJECT, samples=2))
    a, b, m = (attribution(lm64, s, method=x) for x in ("corrupted", "clean", "mean"))
    for kind in a:
        torch.testing.assert_close(m[kind] - s.low_score, ((a[kind] - s.low_score) + (b[kind] - s.low_score)) / 2)


def test_windows_are_sums_of_layers_and_prefix_is_exact(lm64):
    s = TraceSetup.build(lm64, TraceSpec(PROMPT, SUBJECT, samples=2))
    L, b = lm64.adapter.n_layers, s.subject_range[0]
    one = attribution(lm64, s, window=1)
    three = attribution(lm64, s, window=3)
    for kind in ("mlp", "attn"):
        for l in range(L):
            want = sum(one[kind][:, j] - s.low_score for j in window_layers(l, 3, L))
            torch.testing.assert_close(three[kind][:, l] - s.low_score, want)
        assert (three[kind][:b] == s.low_score).all()


@pytest.mark.parametrize("lm64", ["tiny-gpt2", "tiny-neox"], indirect=True)
def test_sign_and_order_agree_with_exact_map_in_the_linear_regime(lm64):
    """A constructed case where the first order holds: noise at 0.01 sigma (300x below ROME's 3 sigma) and single
    layers (window 1). Every cell with a clear effect has the exact map's sign, the estimate is within 5% of the
    largest effect everywhere, and the ranks agree. (With wider windows the estimate also sums the paths from one
    restored module through the others, which the exact restoration overwrites: a first-order difference.)"""
    s = TraceSetup.build(lm64, TraceSpec(PROMPT, SUBJECT, samples=3, noise=parse_noise("0.01s")))
    b = s.subject_range[0]
    est = attribution(lm64, s, window=1)
    for kind in ("hidden", "mlp", "attn"):
        exact = fast_trace(lm64, s, kind, window=1)[b:] - s.low_score
        guess = est[kind][b:] - s.low_score
        big = exact.abs() > 0.05 * exact.abs().max()
        assert big.sum() >= 3 and float(exact.abs().max()) > 1e-5
        assert (torch.sign(exact[big]) == torch.sign(guess[big])).all(), kind
        assert float((exact - guess).abs().max()) < 0.05 * float(exact.abs().max()), kind
        assert spearman(guess, exact) > 0.99, kind


def test_preview_through_the_tracer_is_labelled_and_cached(tiny_by_name, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    lm = tiny_by_name("tiny-gpt2")
    p = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2)).preview()
    assert set(p) == {"hidden", "mlp", "attn"} and all(r.meta["estimate"] for r in p.values())
    monkeypatch.setattr("editkit.tracing.tracer.TraceSetup.build", lambda *a, **k: pytest.fail("preview recomputed"))
    again = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2)).preview(["mlp"])
    assert again["mlp"].scores == p["mlp"].scores


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)  # 1 - 6 * 2 / (4 * 15)
    assert spearman([1, 1, 2, 3], [5, 5, 6, 7]) == pytest.approx(1.0)  # ties share ranks
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))
