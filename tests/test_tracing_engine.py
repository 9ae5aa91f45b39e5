"""The exact engine's new paths against ROME's algorithm (reference.py) on every tiny family: per-sample keys and
values, the path without them, shared window prefixes, the batched unembedding, severing, several kinds in one
schedule, cancelling; and the runner additions it uses (step, KV.prefix, answer_logprob)."""
import pytest
import torch

from editkit.core.errors import Cancelled, EditkitError
from editkit.model.hooks import Hooks
from editkit.model.kv import KV
from editkit.tracing import Tracer, TraceSetup, TraceSpec, fast_trace, reference_trace
from editkit.tracing.engine import Restore, Work, panel, score_restorations, severing_restores
from editkit.tracing.reference import trace_with_patch
from editkit.tracing.severing import sever

PROMPT, SUBJECT = "The Space Needle is in downtown Seattle", "Space Needle"
ATOL = 1e-5


@pytest.fixture
def setup(tiny):
    return tiny, TraceSetup.build(tiny, TraceSpec(PROMPT, SUBJECT, samples=3))


def _close(a, b):
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    assert torch.allclose(a, b, atol=ATOL, rtol=0), float((a - b).abs().max())


@pytest.mark.parametrize("kind,window", [("hidden", 1), ("mlp", 3), ("attn", 3), ("mlp", 10), ("attn", 1)])
def test_engine_equals_reference(setup, kind, window):
    lm, s = setup
    assert s.corrupt_kv is not None and s.corrupt_kv.batch == s.n  # the per-sample keys/values path is taken
    ref = reference_trace(lm, s, kind, window=window)
    _close(fast_trace(lm, s, kind, window=window), ref)
    assert float(ref.max() - ref.min()) > 1e-4


@pytest.mark.parametrize("kind", ["hidden", "mlp", "attn"])
def test_without_per_sample_keys_every_position_is_computed_and_equal(setup, kind):
    """A model whose cache exposes no keys (corrupt_kv None): every restoration runs all positions, same scores."""
    lm, s = setup
    ref = reference_trace(lm, s, kind, window=2)
    s.corrupt_kv = None
    work = Work()
    _close(fast_trace(lm, s, kind, window=2, work=work), ref)
    T = s.input_ids.shape[1]
    assert work.block_rows % T == 0  # whole sequences


def test_shared_window_prefixes_are_computed_once(tiny_by_name):
    """Windows that start at layer 0 share their lower layers: the batch computes fewer block rows than the
    restorations one by one, and gets the same scores."""
    lm = tiny_by_name("tiny-llama")
    s = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=2))
    L = lm.adapter.n_layers
    restores = [r for r in panel(s, "mlp", 3, L) if r.token == s.subject_range[1] - 1]
    assert sum(r.start == 0 for r in restores) >= 2
    together, alone = Work(), Work()
    batch = score_restorations(lm, s, restores, work=together)
    single = torch.stack([score_restorations(lm, s, [r], work=alone)[0] for r in restores])
    _close(batch, single)
    assert together.block_rows < alone.block_rows


def test_small_batches_give_the_same_scores(tiny_by_name, monkeypatch):
    """Long prompts split a token's restorations into bounded batches: the scores do not change."""
    lm = tiny_by_name("tiny-gemma3")
    s = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=2))
    want = fast_trace(lm, s, "attn", window=2)
    monkeypatch.setattr("editkit.tracing.engine.MAX_POSITION_ROWS", 1)
    _close(fast_trace(lm, s, "attn", window=2), want)


def test_bad_restorations_are_clear_errors(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    s = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=2))
    L = lm.adapter.n_layers
    for bad in (Restore(99, 1), Restore(2, L + 1), Restore(2, 2, patches=(("mlp", 1, "clean"),)),
                Restore(2, 0, patches=(("mlp", 1, "noisy"),))):
        with pytest.raises(EditkitError):
            score_restorations(lm, s, [bad])


def test_duplicate_restorations_are_computed_once(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    s = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=2))
    r = Restore(s.subject_range[0], 1, hidden=True)
    once, twice = Work(), Work()
    a = score_restorations(lm, s, [r], work=once)
    b = score_restorations(lm, s, [r, r], work=twice)
    assert once.block_rows == twice.block_rows and once.unembed_rows == twice.unembed_rows
    _close(b, torch.cat([a, a]))


def test_several_kinds_in_one_schedule(setup):
    """Restorations of the three kinds and severing, mixed in one evaluation, give each kind's own scores."""
    lm, s = setup
    L, T = lm.adapter.n_layers, s.input_ids.shape[1]
    kinds = {k: panel(s, k, 2, L) for k in ("hidden", "mlp", "attn")}
    frozen = severing_restores(s, s.subject_range[1] - 1, "mlp", L)
    everything = [r for rs in kinds.values() for r in rs] + frozen
    scores = score_restorations(lm, s, everything)
    for i, kind in enumerate(kinds):
        _close(scores[i * T * L:(i + 1) * T * L].view(T, L), fast_trace(lm, s, kind, window=2))


def test_severing_equals_reference_at_every_layer(setup):
    lm, s = setup
    L = lm.adapter.n_layers
    t = s.subject_range[1] - 1
    out = sever(lm, s)
    hidden = fast_trace(lm, s, "hidden")
    reused = sever(lm, s, hidden=hidden.tolist())
    assert reused.none == hidden[t].tolist()
    for l in range(L):
        for frozen in ("mlp", "attn"):
            ref = trace_with_patch(lm, s, [(t, "hidden", l)], frozen=[(t, frozen, j) for j in range(l + 1, L)])
            assert abs(getattr(out, frozen)[l] - ref) < ATOL and abs(getattr(reused, frozen)[l] - ref) < ATOL
        assert abs(out.none[l] - trace_with_patch(lm, s, [(t, "hidden", l)])) < ATOL
        assert abs(reused.none[l] - out.none[l]) < ATOL


def test_last_layer_and_prefix_shortcuts_are_exact(setup):
    lm, s = setup
    L, T = lm.adapter.n_layers, s.input_ids.shape[1]
    hidden = fast_trace(lm, s, "hidden")
    assert (hidden[:T - 1, L - 1] == s.low_score).all()  # no block reads the last layer at an earlier token
    assert abs(float(hidden[T - 1, L - 1]) - s.high_score) < ATOL  # the clean final state at the last token


def test_cancel_stops_and_leaves_the_model_usable(tiny_by_name):
    lm = tiny_by_name("tiny-neox")
    calls = []

    def cancel():
        calls.append(1)
        return len(calls) > 2

    tracer = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2), cache=False, cancel=cancel)
    with pytest.raises(Cancelled):
        tracer.result("mlp")
    s = tracer.setup
    last = f"resid_post.{lm.adapter.n_layers - 1}"
    with Hooks(lm) as hooks:  # no hook of the cancelled run is left: a plain forward equals the clean run
        clean = hooks.capture([last])
        lm.runner.forward(input_ids=s.input_ids)
    assert torch.equal(clean[last], s.clean[last])
    _close(Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2), cache=False).result("mlp").scores,
           reference_trace(lm, s, "mlp", window=10))


# --- runner additions ------------------------------------------------------------------------------------------
@torch.no_grad()
def test_step_with_per_row_keys_equals_run_blocks(tiny):
    """Stepping block by block with each row's own keys/values of that layer equals run_blocks with the KV."""
    run = tiny.runner
    ids = torch.cat([tiny.tok(PROMPT, return_tensors="pt")["input_ids"]] * 2)
    P, L = 3, tiny.adapter.n_layers
    with Hooks(tiny) as hooks:
        hooks.set("embed", lambda x: x + torch.randn_like(x) * 0.5)  # two different rows
        pre = hooks.capture(["resid_pre.1"])
        out = run.forward(input_ids=ids, keep_kv=True)
    kv = out.kv.prefix(P)
    assert isinstance(kv, KV) and kv.length == P and kv.batch == 2
    h = pre["resid_pre.1"][:, P:]
    calls = run.block_calls(batch=1, length=ids.shape[1] - P, kv=kv.rows([0]))
    want = run.run_blocks(h, 1, calls, kv)
    for l in range(1, L):
        h = run.step(h, l, calls, (kv.keys[l], kv.values[l]))
    torch.testing.assert_close(h, want, rtol=1e-5, atol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("softcap", [None, 5.0])
def test_answer_logprob_is_the_log_softmax(tiny, monkeypatch, softcap):
    monkeypatch.setattr(tiny.adapter, "final_softcap", softcap)
    h = torch.randn(9, tiny.adapter.d_model)
    ids = torch.tensor([3, 3, 7, 1, 0, 2047, 5, 3, 9])
    want = torch.log_softmax(tiny.runner.logits(h), -1).gather(1, ids[:, None])[:, 0]
    for block in (5, 4096):  # blocks that do not divide the vocabulary, and one block
        torch.testing.assert_close(tiny.runner.answer_logprob(h, ids, block=block), want, rtol=0, atol=2e-6)
    one_id = torch.log_softmax(tiny.runner.logits(h), -1)[:, 7]
    torch.testing.assert_close(tiny.runner.answer_logprob(h, 7), one_id, rtol=0, atol=2e-6)


@torch.no_grad()
def test_online_logsumexp_is_accurate_on_the_embedded_vocabulary(gemma):
    """On Gemma's 262k-token vocabulary the engine's p(answer) is within 1e-5 (relative) of a float64 computation,
    about the rounding of the float32 logits themselves (a float32 softmax over the whole vocabulary, as ROME's
    code computes it, rounds the sum of exponentials more coarsely: ~7e-5 relative on this prompt)."""
    s = TraceSetup.build(gemma, TraceSpec("The Space Needle is in downtown", "Space Needle", samples=4))
    L = gemma.adapter.n_layers
    h = torch.cat([s.clean[f"resid_post.{L - 1}"][:, -1], s.corrupt[f"resid_post.{L - 1}"][:, -1]])
    x = gemma.adapter.final_norm(h).double()
    exact = torch.log_softmax(x @ gemma.adapter.unembed_module.weight.double().T, -1)[:, s.answer_id].exp()
    got = gemma.runner.answer_logprob(h, s.answer_id).exp().double()
    assert float(((got - exact) / exact).abs().max()) < 1e-5
    assert float(exact[0]) > 0.3  # the clean answer is likely: the check is not on negligible values
