"""The tracing engine's fast mode (precision "bfloat16": bf16 matmuls in the restored runs and the projection to the
vocabulary): an approximation within its error bound of the exact engine on every tiny family, labelled as one,
cached apart from the exact results (whose cache keys do not change), and refused for an unknown precision."""
import pytest
import torch

from editkit.core.errors import EditkitError
from editkit.tracing import Tracer, TraceSetup, TraceSpec
from editkit.tracing.engine import fast_traces
from editkit.tracing.severing import sever

PROMPT, SUBJECT = "The Space Needle is in downtown Seattle", "Space Needle"
# The fast mode's error bound on the tiny models (|score difference| from the exact engine; their scores span
# 0.01-0.08, the differences measured 1e-4 to 9e-4); Gemma's own bound is measured over known facts (bench trace).
FAST_TOLERANCE = 2e-3


def test_fast_panels_and_severing_are_within_the_bound(tiny):
    s = TraceSetup.build(tiny, TraceSpec(PROMPT, SUBJECT, samples=3))
    kinds = ["hidden", "mlp", "attn"]
    exact = fast_traces(tiny, s, kinds, window=3)
    fast = fast_traces(tiny, s, kinds, window=3, precision="bfloat16")
    for kind in kinds:
        diff = float((exact[kind] - fast[kind]).abs().max())
        assert diff <= FAST_TOLERANCE, (tiny.name, kind, diff)
    assert any(not torch.equal(exact[k], fast[k]) for k in kinds)  # it is another computation
    a, b = sever(tiny, s), sever(tiny, s, precision="bfloat16")
    for curve in ("none", "mlp", "attn"):
        assert max(abs(x - y) for x, y in zip(getattr(a, curve), getattr(b, curve))) <= FAST_TOLERANCE


@torch.no_grad()
@pytest.mark.parametrize("softcap", [None, 5.0])
def test_fast_projection_is_close_to_the_log_softmax(tiny, monkeypatch, softcap):
    """vocab_pass_bf16: the answer's logit in float32, the others as z - c in the bf16 matmul's accumulator."""
    monkeypatch.setattr(tiny.adapter, "final_softcap", softcap)
    h = torch.randn(9, tiny.adapter.d_model)
    ids = torch.tensor([3, 3, 7, 1, 0, 2047, 5, 3, 9])
    want = torch.log_softmax(tiny.runner.logits(h), -1).gather(1, ids[:, None])[:, 0].exp()
    got = tiny.runner.answer_logprob(h, ids, fast=True, block=100).exp()
    assert float((got - want).abs().max()) < 2e-3 * float(want.max()) + 1e-6


def test_fast_results_are_labelled_and_cached_apart(tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    exact = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2, kinds="hidden"))
    fast = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2, kinds="hidden", precision="bfloat16"))
    assert "precision" not in exact.key  # exact results keep the cache keys they had before the fast mode
    assert exact._path("hidden") != fast._path("hidden")
    assert exact._path("preview") == fast._path("preview")  # the preview has no matmuls of the engine's
    r = fast.result("hidden")
    assert r.meta["approximation"] is True and r.meta["precision"] == "bfloat16"
    assert "approximation" not in exact.result("hidden").meta
    assert fast.severing().precision == "bfloat16"


def test_an_unknown_precision_is_a_clear_error():
    with pytest.raises(EditkitError, match="precision must be one of"):
        TraceSpec(PROMPT, SUBJECT, precision="float16")
