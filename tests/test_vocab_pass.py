"""vocab.vocab_pass (the exact online logsumexp over the vocabulary) against the plain computation on (N, V)
logits: in place where nothing needs a gradient, out of place where attribution patching takes one."""
import pytest
import torch

from editkit.model.vocab import vocab_pass


def _data(cap):
    g = torch.Generator().manual_seed(1)
    x, W, b = torch.randn(9, 40, generator=g), torch.randn(5000, 40, generator=g) / 3, torch.randn(5000, generator=g)
    ids = torch.tensor([0, 4999, 4096, 4095, 17, 17, 2500, 1, 3000])
    return x, W, b, ids


def _plain(x, W, b, cap):
    z = torch.nn.functional.linear(x.double(), W.double(), None if b is None else b.double())
    return torch.tanh(z / cap) * cap if cap else z


@pytest.mark.parametrize("cap", [None, 4.0])
@pytest.mark.parametrize("block", [4096, 700])
def test_lse_answer_argmax_and_mean_equal_the_plain_computation(cap, block):
    x, W, b, ids = _data(cap)
    for bias in (None, b):
        z = _plain(x, W, bias, cap)
        lse, answer, mean, best = vocab_pass(x, W, bias, cap, ids=ids, mean=not cap, block=block)
        assert torch.allclose(lse, torch.logsumexp(z, 1), rtol=0, atol=1e-5)
        assert torch.allclose(answer, z[torch.arange(len(ids)), ids], rtol=0, atol=1e-5)
        assert torch.equal(best, z.argmax(1))
        if not cap:
            expected = torch.softmax(z, 1) @ W.double()
            assert torch.allclose(mean.double(), expected, rtol=0, atol=1e-5)


def test_answer_logits_are_read_before_the_block_is_exponentiated():
    """The answer's logit is the float32 logit itself, bit for bit (read before the in-place exp)."""
    x, W, b, ids = _data(None)
    _, answer, _, _ = vocab_pass(x, W, b, ids=ids)
    z = torch.nn.functional.linear(x, W, b)
    assert torch.equal(answer, z[torch.arange(len(ids)), ids].double())


@pytest.mark.parametrize("cap", [None, 4.0])
def test_the_gradient_flows_as_through_torch_logsumexp(cap):
    """With a gradient asked for (attribution patching), the pass stays out of place and differentiable."""
    x, W, b, ids = _data(cap)
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    lse, answer, _, _ = vocab_pass(x1, W, b, cap, ids=ids)
    (answer - lse).exp().sum().backward()
    z = torch.nn.functional.linear(x2, W, b)
    z = torch.tanh(z / cap) * cap if cap else z
    torch.softmax(z, 1)[torch.arange(len(ids)), ids].sum().backward()
    assert torch.allclose(x1.grad, x2.grad, rtol=0, atol=1e-5)
