"""The runner (editkit/model/runner.py) on every tiny family: partial runs equal the full model."""
import pytest
import torch

from editkit.core.errors import EditkitError
from editkit.model.hooks import Hooks
from editkit.model.kv import KV
from editkit.model.loading import load_model
from editkit.model.sites import Site, parse, site
from editkit.model.tokens import encode

PROMPT = "The Space Needle is in downtown Seattle"


def _ids(lm):
    return encode(lm, PROMPT)["input_ids"]


@torch.no_grad()
def test_forward_equals_model(tiny):
    ids = _ids(tiny)
    logits = tiny.model(input_ids=ids).logits
    hidden = tiny.runner.forward(input_ids=ids).hidden
    torch.testing.assert_close(tiny.runner.logits(hidden, norm=False), logits, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_stop_after_site_stops_there(tiny):
    ids, L = _ids(tiny), tiny.adapter.n_layers
    with Hooks(tiny) as hooks:
        got = hooks.capture(["mlp_key.1", "resid_post.1", f"resid_post.{L - 1}"])
        out = tiny.runner.forward(input_ids=ids, stop_after="mlp_key.1")
    assert out.hidden is None and "mlp_key.1" in got
    assert "resid_post.1" not in got and f"resid_post.{L - 1}" not in got  # nothing after the stop ran
    with Hooks(tiny) as hooks:
        full = hooks.capture(["mlp_key.1"])
        tiny.runner.forward(input_ids=ids)
    assert torch.equal(full["mlp_key.1"], got["mlp_key.1"])


@torch.no_grad()
def test_kv_prefix_continues_the_run(tiny):
    ids = _ids(tiny)
    P = 3
    full = tiny.runner.forward(input_ids=ids).hidden
    prefix = tiny.runner.forward(input_ids=ids[:, :P], keep_kv=True).kv
    assert isinstance(prefix, KV) and prefix.length == P
    saved = [k.clone() for k in prefix.keys]
    rest = tiny.runner.forward(input_ids=ids[:, P:], kv=prefix).hidden
    torch.testing.assert_close(rest, full[:, P:], rtol=1e-5, atol=1e-5)
    again = tiny.runner.forward(input_ids=ids[:, P:], kv=prefix).hidden  # the snapshot was not changed
    assert torch.equal(again, rest)
    assert all(torch.equal(a, b) for a, b in zip(prefix.keys, saved))


@torch.no_grad()
@pytest.mark.parametrize("start", [0, 2])
def test_run_blocks_from_a_layer(tiny, start):
    ids, L = _ids(tiny), tiny.adapter.n_layers
    with Hooks(tiny) as hooks:
        states = hooks.capture([f"resid_pre.{start}", f"resid_post.{L - 1}"])
        out = tiny.runner.forward(input_ids=ids, calls=True)
    h = tiny.runner.run_blocks(states[f"resid_pre.{start}"], start, out.calls)
    torch.testing.assert_close(h, states[f"resid_post.{L - 1}"], rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_run_blocks_on_a_broadcast_prefix(tiny):
    """Several rows continue one shared prefix (KV.rows(int) broadcasts it); block calls recorded from a cheap
    zero-embedding run serve real residuals."""
    ids, L, P = _ids(tiny), tiny.adapter.n_layers, 3
    with Hooks(tiny) as hooks:
        states = hooks.capture(["resid_pre.1", f"resid_post.{L - 1}"])
        tiny.runner.forward(input_ids=ids)
    prefix = tiny.runner.forward(input_ids=ids[:, :P], keep_kv=True).kv
    T = ids.shape[1]
    calls = tiny.runner.block_calls(batch=1, length=T - P, kv=prefix)
    h = states["resid_pre.1"][:, P:].repeat(4, 1, 1)
    out = tiny.runner.run_blocks(h, 1, calls, kv=prefix.rows(4))
    for row in out:
        torch.testing.assert_close(row, states[f"resid_post.{L - 1}"][0, P:], rtol=1e-4, atol=1e-4)
    with pytest.raises(EditkitError, match="without a key/value cache"):
        tiny.runner.run_blocks(h, 1, tiny.runner.block_calls(1, T - P), kv=prefix.rows(4))


@torch.no_grad()
def test_answer_logprob_is_the_log_softmax(tiny):
    ids = _ids(tiny)
    hidden = tiny.runner.forward(input_ids=ids).hidden[0]
    probs = torch.softmax(tiny.model(input_ids=ids).logits[0].float(), -1)
    answer = int(probs[-1].argmax())
    got = tiny.runner.answer_logprob(hidden, answer, norm=False, rows=3, block=100).exp()  # chunks, vocab blocks
    torch.testing.assert_close(got, probs[:, answer], rtol=1e-5, atol=1e-6)


def test_sites_resolve_on_every_family(tiny):
    a = tiny.adapter
    for kind in ("embed", "resid_pre", "resid_post", "attn_out", "mlp_out", "attn_write", "mlp_write", "mlp_key",
                 "attn_z"):
        s = Site(kind) if kind == "embed" else Site(kind, 1)
        assert s.module(a) is not None and parse(s.name) == s
    assert site("hidden", 2) == Site("resid_post", 2) and site("mlp", 0).name == "mlp_out.0"
    for bad in ("mlp_out", "nope.1", "mlp_out.x"):
        with pytest.raises(EditkitError):
            parse(bad)
    with pytest.raises(EditkitError, match="out of range"):
        Site("mlp_out", 99).module(a)


@torch.no_grad()
def test_hooks_act_only_in_their_own_thread(tiny):
    """A hook registered in one thread does nothing to another thread's forward pass on the same model."""
    import threading

    ids = _ids(tiny)
    clean = tiny.runner.forward(input_ids=ids).hidden
    seen = {}
    entered, release = threading.Event(), threading.Event()

    def other():
        entered.wait()
        seen["other"] = tiny.runner.forward(input_ids=ids).hidden
        release.set()

    t = threading.Thread(target=other)
    t.start()
    with Hooks(tiny) as hooks:
        hooks.set("resid_post.0", lambda h: h * 0)
        entered.set()
        release.wait()
        zeroed = tiny.runner.forward(input_ids=ids).hidden
    t.join()
    assert torch.equal(seen["other"], clean)
    assert not torch.allclose(zeroed, clean)


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-gemma3"])
def test_read_equals_hooks_and_stops_early(name):
    """runner.read gives the tensors a hand-written Hooks block gives, stops after the last one read (no later
    module runs), and full_logits equals the model's own logits."""

    lm = load_model(name)
    ids = lm.tok("The Eiffel Tower is in", return_tensors="pt")["input_ids"]
    sites = ["mlp_key.1", "resid_post.0", "attn_out.1"]
    with Hooks(lm) as hooks:
        want = hooks.capture(sites)
        lm.runner.forward(input_ids=ids)
    ran = []
    last = lm.adapter.block(lm.adapter.n_layers - 1)
    handle = last.register_forward_hook(lambda *a: ran.append(1))
    try:
        got = lm.runner.read(sites, input_ids=ids)
    finally:
        handle.remove()
    assert not ran and got.hidden is None
    for s in sites:
        assert torch.equal(got[s], want[s])
    full = lm.runner.read(["resid_post.0"], input_ids=ids, full=True)
    assert full.hidden is not None
    assert torch.allclose(lm.runner.full_logits(input_ids=ids), lm.model(input_ids=ids).logits.float(), atol=1e-5)
