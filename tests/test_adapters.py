"""Adapters and hooks on tiny models of every family."""
import pytest
import torch
from torch import nn

from editkit.core.errors import EditkitError
from editkit.lens import logit_lens, predict, predict_with_lens
from editkit.model.adapters import adapter_for
from editkit.model.hooks import Hooks
from editkit.model.text import block_outputs
from editkit.model.tokens import encode

PROMPT = "The Space Needle is in downtown Seattle"


def _logits(lm, prompt=PROMPT):
    with torch.no_grad():
        return lm.model(**encode(lm, prompt)).logits


def test_adapter_shapes(tiny):
    a = tiny.adapter
    width = 96 if tiny.name == "tiny-llama-tied" else 64  # 6 query heads (GQA 6 / 2) need a width divisible by 6
    assert a.n_layers == 4 and a.d_model == width and a.d_ff == 256
    for l in range(a.n_layers):
        assert a.down_weight(l).shape == (a.d_model, a.d_ff)
    assert a.family.parallel == (tiny.name in ("tiny-gptj", "tiny-neox", "tiny-phi"))
    assert a.describe()["parameters"] > 0


def test_down_weight_maps_key_to_value(tiny):
    """value = W_out @ key (+ bias) for the down-projection, whatever the storage layout (GPT-2 Conv1D)."""
    a = tiny.adapter
    with Hooks() as hooks:
        keys = hooks.capture({"d": a.down_proj(1)}, what="input")
        vals = hooks.capture({"d": a.down_proj(1)})
        _logits(tiny)
    bias = a.down_bias(1)
    expected = keys["d"] @ a.down_weight(1).T + (bias if bias is not None else 0)
    torch.testing.assert_close(expected, vals["d"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("part", ["block", "attn", "mlp", "down_proj"])
def test_patching_own_clean_value_is_identity(tiny, part):
    a = tiny.adapter
    clean = _logits(tiny)
    for layer in range(a.n_layers):
        module = getattr(a, part)(layer)
        with Hooks() as hooks:
            cache = hooks.capture({"x": module})
            _logits(tiny)
        n = cache["x"].shape[1]
        with Hooks() as hooks:
            hooks.patch(module, range(n), cache["x"][0])
            patched = _logits(tiny)
        assert torch.equal(patched, clean), (part, layer)


def test_patching_changes_something(tiny):
    """The round trip above is not vacuous: patching zeros at a block changes the logits."""
    a = tiny.adapter
    clean = _logits(tiny)
    with Hooks() as hooks:
        hooks.patch(a.block(1), [2], torch.zeros(a.d_model))
        assert not torch.allclose(_logits(tiny), clean)


def test_logit_lens_last_layer_equals_model_logits(tiny):
    hidden, logits = block_outputs(tiny, PROMPT)
    torch.testing.assert_close(tiny.runner.logits(hidden[-1]), logits, rtol=1e-4, atol=1e-4)
    lens = logit_lens(tiny, PROMPT, k=3)
    assert len(lens.layers) == tiny.adapter.n_layers and lens.k == 3
    top = tiny.tok.decode([int(logits[-1].argmax())])
    assert lens.layers[-1][0].token == top


def test_predict_with_lens_gives_what_predict_and_logit_lens_give(tiny):
    """One run for both (the served home page): the same top tokens, probabilities and lens rows."""
    preds, lens = predict_with_lens(tiny, PROMPT, k=3)
    ref, ref_lens = predict(tiny, PROMPT, 3), logit_lens(tiny, PROMPT, k=3)
    assert [p.token_id for p in preds] == [p.token_id for p in ref] and preds.prompt == ref.prompt
    for got, want in zip(preds, ref):
        assert got.prob == pytest.approx(want.prob, abs=1e-5) and got.logit == pytest.approx(want.logit, abs=1e-4)
    assert lens.tokens == ref_lens.tokens and len(lens.layers) == len(ref_lens.layers)
    for row, want in zip(lens.layers, ref_lens.layers):
        assert [t.token for t in row] == [t.token for t in want]
        assert [t.prob for t in row] == pytest.approx([t.prob for t in want], abs=1e-6)
    assert lens.layers[-1][0].token == preds.top.token


def test_hooks_removed_on_exception(tiny):
    a = tiny.adapter
    with pytest.raises(RuntimeError):
        with Hooks() as hooks:
            hooks.set(a.block(0), lambda h: h * 0)
            raise RuntimeError("boom")
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in tiny.model.modules())


def test_input_patch_roundtrip(tiny):
    a = tiny.adapter
    clean = _logits(tiny)
    with Hooks() as hooks:
        keys = hooks.capture({"k": a.down_proj(2)}, what="input")
        _logits(tiny)
    with Hooks() as hooks:
        hooks.patch(a.down_proj(2), range(keys["k"].shape[1]), keys["k"][0], what="input")
        assert torch.equal(_logits(tiny), clean)


def test_unknown_architecture_is_clear_error():
    class Fake(nn.Module):
        config = type("C", (), {"model_type": "bloom"})()

    with pytest.raises(EditkitError, match="unsupported architecture 'bloom'"):
        adapter_for(Fake())


def test_missing_module_is_named(tiny_by_name):
    lm = tiny_by_name("tiny-llama")

    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.config = lm.model.config
            self.model = nn.Module()

    with pytest.raises(EditkitError, match="lacks: .*embed"):
        adapter_for(Broken())
