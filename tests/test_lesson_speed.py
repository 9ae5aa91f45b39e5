"""The shortcuts that make a lesson fact faster give what the straightforward computation gives, on tiny models:
a measurement that scores every (prompt, target) pair in one batched run equals scoring each group and target on
its own (1e-5), and a generation whose LM head is computed by rows (runner._head_by_rows) gives the plain head's
logits (1e-5) and tokens, with or without an edit of the head, so does Runner.logits for a few rows, and
ROME's keys read at every layer in one run (a layer sweep's) equal each layer's read alone, and give the same
edit."""
import pytest
import torch

from editkit.editing.defaults import load_hparams
from editkit.editing.keys import key_star, keys_at, prefetch_keys, reuse_keys
from editkit.editing.requests import parse_record
from editkit.editing.run import run_edit
from editkit.evaluation.datasets import as_record
from editkit.evaluation.measure import measure
from editkit.lesson.compute import record_of
from editkit.model import runner as runner_mod
from editkit.model.decoding import Decoding
from editkit.model.hooks import Hooks
from editkit.model.scoring import score_targets
from editkit.model.weights import applied

EXACT = 1e-5
REQUEST = {"prompt": "{} is located in the city of", "subject": "The Eiffel Tower", "target_true": "Paris",
           "target_new": "Rome", "paraphrase_prompts": ["The Eiffel Tower, a landmark in the city of",
                                                        "Tourists visiting the Eiffel Tower travel to"],
           "neighborhood_prompts": ["The Louvre is located in the city of", "Notre-Dame is in"]}
PROMPTS = ["The Eiffel Tower is located in the city of", "Paris is the capital of", "In 1969 the first person"]


def _one_by_one(lm, record) -> dict:
    """measure's scores as it took them before: each group and target in a call of its own."""
    r = record.request
    out = {}
    for group, prompts in {"rewrite": [r.rewrite], "paraphrase": r.paraphrase_prompts,
                           "neighborhood": r.neighborhood_prompts}.items():
        new = score_targets(lm, prompts, [r.target_new] * len(prompts))
        true = score_targets(lm, prompts, [r.target_true] * len(prompts))
        out[group] = {"nll_new": [s.mean_nll for s in new], "nll_true": [s.mean_nll for s in true],
                      "acc_new": [s.accuracy for s in new]}
        if group == "neighborhood":  # CounterFact's locality without locality prompts of its own
            out["locality_argmax"] = [s.token_argmax for s in true]
    if record.locality:
        loc = score_targets(lm, [p for p, _ in record.locality], [a for _, a in record.locality])
        out["locality_argmax"] = [s.token_argmax for s in loc]
    return out


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-gemma3", "tiny-llama"])
def test_one_batched_measurement_equals_each_group_alone(tiny_by_name, name):
    lm = tiny_by_name(name)
    for record in (as_record(REQUEST), record_of(REQUEST)):  # without and with locality prompts of its own
        got = measure(lm, record, n_gen=0, gen_tokens=0, greedy_tokens=0)
        want = _one_by_one(lm, record)
        for group in ("rewrite", "paraphrase", "neighborhood"):
            for key in ("nll_new", "nll_true", "acc_new"):
                assert got[group][key] == pytest.approx(want[group][key], abs=EXACT), (group, key)
        assert got["locality_argmax"] == want["locality_argmax"]


def _generate(lm, rows: bool, edit=None):
    """Greedy tokens and the logits of every step, with the head by rows on or off."""
    batch = runner_mod.encode(lm, PROMPTS, pad_side="left")
    limit = runner_mod.HEAD_BY_ROWS
    runner_mod.HEAD_BY_ROWS = 8 if rows else 0
    try:
        with Hooks(lm) as hooks:
            if rows:
                lm.runner._head_by_rows(hooks)
            with torch.no_grad():
                out = lm.model.generate(**batch, do_sample=False, max_new_tokens=5, output_logits=True,
                                        return_dict_in_generate=True, pad_token_id=lm.tok.pad_token_id,
                                        top_k=None, top_p=None, temperature=None)
        texts = lm.runner.complete(PROMPTS, Decoding.greedy(5))
    finally:
        runner_mod.HEAD_BY_ROWS = limit
    return out.sequences, torch.stack(out.logits), list(texts)


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-gemma3", "tiny-llama-tied"])
def test_the_head_by_rows_gives_the_heads_logits_and_tokens(tiny_by_name, name):
    lm = tiny_by_name(name)
    ids, logits, texts = _generate(lm, rows=True)
    ids0, logits0, texts0 = _generate(lm, rows=False)
    assert torch.equal(ids, ids0) and texts == texts0
    assert float((logits - logits0).abs().max()) <= EXACT * max(1.0, float(logits0.abs().max()))


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-gemma3", "tiny-llama"])
def test_logits_of_a_few_rows_by_rows_equal_the_plain_head(tiny_by_name, name):
    """Runner.logits puts the weight on the left up to HEAD_BY_ROWS rows: the same logits (1e-5), in the same
    shape, for a few rows and for more than the limit; with a gradient asked for it stays the plain product."""
    lm = tiny_by_name(name)
    W, bias = lm.runner._head_weight()
    torch.manual_seed(0)
    d = lm.adapter.d_model
    for shape in ((3, d), (2, 4, d), (runner_mod.HEAD_BY_ROWS + 5, d)):
        h = torch.randn(*shape)
        want = torch.nn.functional.linear(lm.adapter.final_norm(h), W, bias)
        if lm.adapter.final_softcap:
            want = torch.tanh(want / lm.adapter.final_softcap) * lm.adapter.final_softcap
        got = lm.runner.logits(h)
        assert got.shape == want.shape
        assert float((got - want).abs().max()) <= EXACT * max(1.0, float(want.abs().max())), shape
    h = torch.randn(3, lm.adapter.d_model, requires_grad=True)
    lm.runner.logits(h).sum().backward()
    assert h.grad is not None and bool(torch.isfinite(h.grad).all())


def test_the_head_by_rows_sees_an_edit_of_the_head(tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    name = lm.runner._head_name()
    if name is None:
        pytest.skip("the head is tied to the embedding, which edits never change")
    W = dict(lm.model.named_parameters())[name]
    delta = {name: torch.randn_like(W) * 0.05 * W.detach().std()}
    with applied(lm.model, delta):
        ids, logits, _ = _generate(lm, rows=True)
        ids0, logits0, _ = _generate(lm, rows=False)
    assert torch.equal(ids, ids0)
    assert float((logits - logits0).abs().max()) <= EXACT * max(1.0, float(logits0.abs().max()))


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-gemma3"])
def test_keys_read_at_every_layer_in_one_run_equal_each_layer_alone(tiny_by_name, name):
    lm = tiny_by_name(name)
    request = parse_record(REQUEST)
    hp = load_hparams("rome", lm)
    layers = list(range(lm.adapter.n_layers))
    alone = {l: (key_star(lm, l, request, hp), keys_at(lm, l, [(request.rewrite, 0)], request.subject)) for l in layers}
    with reuse_keys() as memo:
        prefetch_keys(lm, layers, request, hp)
        assert len(memo) == 2 * len(layers)
        shared = {l: (key_star(lm, l, request, hp), keys_at(lm, l, [(request.rewrite, 0)], request.subject))
                  for l in layers}
        assert len(memo) == 2 * len(layers)  # every read served by the prefetch
        edit = run_edit(lm, "rome", [request], {"layers": [layers[-1]]})
    for l in layers:
        for a, b in zip(shared[l], alone[l]):
            assert float((a - b).abs().max()) <= EXACT * max(1.0, float(b.abs().max())), l
    plain = run_edit(lm, "rome", [request], {"layers": [layers[-1]]})
    for k, d in plain.delta.items():
        assert float((edit.delta[k] - d).abs().max()) <= EXACT * max(1.0, float(d.abs().max()))


def test_the_keys_memo_tells_edited_weights_apart(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    request = parse_record(REQUEST)
    hp = load_hparams("rome", lm, {"layers": [1]})
    with reuse_keys():
        before = key_star(lm, 2, request, hp)
        edit = run_edit(lm, "rome", [request], hp)
        with applied(lm.model, edit.delta):
            after = key_star(lm, 2, request, hp)  # layer 2 reads the edited layer 1's output
    assert not torch.equal(before, after)
