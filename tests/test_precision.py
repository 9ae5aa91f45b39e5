"""Half-precision weights: bfloat16 / float16 loads, edits formed in float32 and rounded once, bf16 edits as effective
as fp32 ones, tracing within a stated tolerance, and the tied LM head of a Llama left alone by the target
optimisation (EasyEdit #458)."""
import functools

import pytest
import torch

from editkit.cli import main
from editkit.core.errors import EditkitError
from editkit.editing.context import TEMPLATES, context_templates
from editkit.editing.defaults import load_hparams
from editkit.editing.requests import parse_requests
from editkit.editing.run import run_edit
from editkit.editing.stats import second_moment
from editkit.model.loading import TINY, load_model, tiny_config
from editkit.model.scoring import score_targets
from editkit.model.weights import applied, apply_delta, current, restore
from editkit.tracing import TraceSetup, TraceSpec, fast_trace

# One request every tiny family can be pushed towards (ROME's and MEMIT's target optimisation moves it far).
REQUEST = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English",
           "target_true": "French"}
TRACE_TOLERANCE = 0.02  # max |p_bf16 - p_fp32| of a causal-trace score on the tiny models (measured: <= 0.011)


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    """A private cache: the bf16 copies are given the fp32 models' context templates below (to compare precision,
    not two samples of template text), which must not leak into the shared cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("EDITKIT_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


@functools.lru_cache(maxsize=None)
def _half(name, dtype="bfloat16"):
    return load_model(name, device="cpu", dtype=dtype)


def _same_templates(full, half, method):
    """The half-precision copy edits with the fp32 model's context templates. Each model samples its own (cached
    under its name), and on a tiny random model two samples of template text move the key k* by more than
    precision does (measured on tiny-llama-tied: k* 70% apart with its own bf16 templates)."""
    hp = load_hparams(method, full)
    TEMPLATES.put(TEMPLATES.path(half.name, n=hp.context_templates, length=hp.context_length, seed=0),
                  context_templates(full, hp.context_templates, hp.context_length))


def _margin(lm, delta) -> float:
    """log P(new) - log P(true) on the rewrite prompt, with `delta` applied."""
    r = parse_requests(REQUEST)[0]
    with applied(lm, delta):
        new, true = score_targets(lm, [r.rewrite, r.rewrite], [r.target_new, r.target_true])
    return new.logprob - true.logprob


def test_half_precision_load_names_and_errors(tiny_by_name):
    lm = _half("tiny-llama")
    assert lm.name == "tiny-llama@bfloat16" and lm.dtype == torch.bfloat16
    assert all(p.dtype == torch.bfloat16 for p in lm.model.parameters())
    again = load_model("tiny-llama@bfloat16", device="cpu")  # the name carries the dtype back
    assert again.name == lm.name and again.dtype == torch.bfloat16
    fp32 = tiny_by_name("tiny-llama")
    assert lm.describe()["weights_bytes"] * 2 == fp32.describe()["weights_bytes"]
    assert load_hparams("rome", lm).layers == load_hparams("rome", fp32).layers  # same defaults file
    with pytest.raises(EditkitError, match="dtype must be one of"):
        load_model("tiny-llama", dtype="int8")
    with pytest.raises(EditkitError, match="asks for bfloat16"):
        load_model("tiny-llama@bfloat16", dtype="float16")


def test_cli_dtype_on_every_model_command(capsys):
    assert main(["predict", "--model", "tiny-gpt2", "--dtype", "bfloat16", "Hello", "--top", "2", "--json"]) == 0
    captured = capsys.readouterr()
    assert '"model": "tiny-gpt2@bfloat16"' in captured.out
    assert "memory estimate: tiny-gpt2@bfloat16" in captured.err and "x 2 bytes (bfloat16)" in captured.err


def test_applied_forms_w_plus_delta_in_float32_and_rounds_once():
    """Nested edits of a bf16 weight: each is far below half a bf16 step of W, so adding them one by one in bf16
    would leave W unchanged; their float32 sum, rounded once, moves it (and equals an in-place edit)."""
    lm = _half("tiny-gpt2")
    name = lm.adapter.param_name("down_proj", 1)
    W = dict(lm.model.named_parameters())[name].detach().clone()
    # eps |w| is between one and two bf16 steps of w: 0.2 eps |w| is under half a step (lost when added in bf16),
    # four of them are at least 0.8 of a step (they move w when summed first)
    d = 0.2 * torch.finfo(torch.bfloat16).eps * W.float().abs()
    assert torch.equal((W + d.to(torch.bfloat16)), W)  # the drift that half-precision accumulation would cause
    with applied(lm, {name: d}), applied(lm, {name: d}), applied(lm, {name: d}), applied(lm, {name: d}):
        seen = current(lm, name)
        assert seen.dtype == torch.bfloat16
        assert torch.equal(seen, (W.float() + 4 * d).to(torch.bfloat16))
        assert not torch.equal(seen, W)
    assert torch.equal(current(lm, name), W)  # nothing left behind
    backup = apply_delta(lm.model, {name: 4 * d})  # the in-place edit rounds the same way
    try:
        assert torch.equal(dict(lm.model.named_parameters())[name], (W.float() + 4 * d).to(torch.bfloat16))
    finally:
        restore(lm.model, backup)


@pytest.mark.parametrize("method", ["rome", "memit"])
def test_bf16_edit_is_as_effective_as_fp32(tiny, method):
    """The same edit on the bf16 copy of each tiny family: float32 deltas, and the same push towards the new
    target as in fp32 (margin log P(new) - log P(true) moved by the same amount within 20%)."""
    half = _half(tiny.name)
    _same_templates(tiny, half, method)
    moved = {}
    for lm in (tiny, half):
        result = run_edit(lm, method, REQUEST)
        assert all(d.dtype == torch.float32 for d in result.delta.values())
        moved[lm.dtype] = _margin(lm, result.delta) - _margin(lm, {})
    full, low = moved[torch.float32], moved[torch.bfloat16]
    assert full > 0.1, f"the fp32 edit barely moved ({full:.3f})"
    assert abs(low - full) <= 0.2 * full + 0.1, (full, low)


@pytest.mark.parametrize("method", ["pmet", "alphaedit"])
def test_bf16_pmet_and_alphaedit(tiny_by_name, method):
    """PMET and AlphaEdit on the tied GQA Llama: float32 deltas, the spreading covers the same share of the distance
    to the targets, and the margin moves alike (PMET barely moves this tiny model in either precision)."""
    lm, half = tiny_by_name("tiny-llama-tied"), _half("tiny-llama-tied")
    _same_templates(lm, half, method)
    moved, reached = [], []
    for model in (lm, half):
        result = run_edit(model, method, REQUEST)
        assert all(d.dtype == torch.float32 and torch.isfinite(d).all() for d in result.delta.values())
        moved.append(_margin(model, result.delta) - _margin(model, {}))
        reached.append(result.info["target_reached"][0])
    assert abs(moved[1] - moved[0]) <= 0.2 * abs(moved[0]) + 0.1, moved
    assert abs(reached[1] - reached[0]) <= 0.1, reached


def test_bf16_statistics_are_float32_and_close(tiny_by_name):
    lm, half = tiny_by_name("tiny-llama"), _half("tiny-llama")
    C, C_half = second_moment(lm, [1], 3000)[1], second_moment(half, [1], 3000)[1]
    assert C_half.dtype == torch.float32
    assert float((C_half - C).norm() / C.norm()) < 0.02


def test_bf16_tracing_within_tolerance(tiny):
    half = _half(tiny.name)
    prompt, subject = "The Space Needle is in downtown Seattle", "Space Needle"
    full_setup = TraceSetup.build(tiny, TraceSpec(prompt, subject, samples=3, noise="0.5"))
    half_setup = TraceSetup.build(half, TraceSpec(prompt, subject, samples=3, noise="0.5"))  # the same noise draw
    assert abs(half_setup.high_score - full_setup.high_score) <= TRACE_TOLERANCE
    for kind in ("hidden", "mlp"):
        a, b = fast_trace(tiny, full_setup, kind, window=2), fast_trace(half, half_setup, kind, window=2)
        assert float((a - b).abs().max()) <= TRACE_TOLERANCE, (kind, float((a - b).abs().max()))


# --- the tied LM head ----------------------------------------------------------------------------------------------
def test_tied_head_is_one_tensor_left_alone_by_edits(tiny_by_name):
    """tiny-llama-tied: the LM head is the embedding (one Parameter). An edit optimises targets through that head
    (the fused vocabulary pass reads it); afterwards the two are still the same tensor, unchanged, nothing was
    resized, and the edit reached its target."""
    lm = tiny_by_name("tiny-llama-tied")
    head, embed = lm.model.lm_head.weight, lm.model.model.embed_tokens.weight
    assert head is embed and lm.model.config.tie_word_embeddings
    assert lm.model.config.num_key_value_heads < lm.model.config.num_attention_heads  # GQA as well
    before = head.detach().clone()
    shape = tuple(head.shape)
    before_margin = _margin(lm, {})
    for method in ("rome", "memit"):
        result = run_edit(lm, method, REQUEST)
        assert not any("embed" in n or "lm_head" in n for n in result.delta)
        assert lm.model.lm_head.weight is lm.model.model.embed_tokens.weight
        assert tuple(lm.model.lm_head.weight.shape) == shape and len(lm.tok) <= shape[0]
        assert torch.equal(lm.model.lm_head.weight, before)
        with applied(lm, result.delta):
            assert torch.equal(lm.model.lm_head.weight, before)
        losses = result.info["requests"][0]["losses"]
        assert losses[-1]["p_target"] > 2 * losses[0]["p_target"]  # the optimised target reaches the new token
        after = _margin(lm, result.delta)
        assert after > before_margin + (0.5 if method == "rome" else 0.1), (method, before_margin, after)


def test_tiny_families_include_tied_and_gqa():
    assert "tiny-llama-tied" in TINY
    for name in TINY:
        config = tiny_config(name)
        heads = getattr(config, "num_attention_heads", None)
        kv = getattr(config, "num_key_value_heads", None)
        if name in ("tiny-llama", "tiny-llama-tied"):
            assert kv < heads  # grouped-query attention
        if name == "tiny-llama-tied":
            assert heads // kv == 3  # as SmolLM2's 9 query / 3 KV heads
