"""FFN key-value memories (Geva et al. 2021): identities of the decomposition, interventions, the trigger index,
its cache, the analyses, the CLI and the page."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from editkit.core.errors import EditkitError
from editkit.memories import geva, triggers
from editkit.memories.inspect import capture_ffn, memories_at
from editkit.memories.intervene import add_hooks, intervene, intervened_logits, parse_memory
from editkit.model.hooks import Hooks
from editkit.model.tokens import encode

PROMPT = "The Eiffel Tower is located in the city of"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))
    triggers._loaded.clear()
    return tmp_path / "cache"


def test_values_sum_to_down_projection_output(tiny):
    """FFN(x) = sum_i m_i v_i + b (Geva Eq. 2) at every layer and position."""
    cap = capture_ffn(tiny, PROMPT)
    a = tiny.adapter
    for l in range(a.n_layers):
        W = a.down_weight(l)
        b = a.down_bias(l)
        recon = cap["m"][l] @ W.T + (b if b is not None else 0)
        torch.testing.assert_close(recon, cap["out"][l], atol=1e-5, rtol=1e-5)


def test_memories_view(tiny):
    a = tiny.adapter
    view = memories_at(tiny, PROMPT, a.n_layers - 1, top=5)
    d = json.loads(json.dumps(view.to_json()))
    assert type(view).from_json(d) == view and len(view.to_frame()) == 5 and view.figure().data
    assert len(view.memories) == 5 and len(view.lens) == a.n_layers
    contrib = [m.contribution for m in view.memories]
    assert contrib == sorted(contrib, reverse=True)
    m0 = view.memories[0]
    v_norm = a.down_weight(m0.layer)[:, m0.index].norm().item()
    assert m0.contribution == pytest.approx(abs(m0.coefficient) * v_norm, rel=1e-5)
    assert m0.label == f"L{m0.layer}.M{m0.index}"
    logits = tiny.model(**encode(tiny, PROMPT)).logits[0, -1]
    cap = capture_ffn(tiny, PROMPT)
    with Hooks() as hooks, torch.no_grad():
        mlp = hooks.capture({str(l): a.mlp(l) for l in range(a.n_layers)})
        blocks = hooks.capture({str(l): a.block(l) for l in range(a.n_layers)})
        tiny.model(**encode(tiny, PROMPT))
    for l in range(a.n_layers):
        if a.family.parallel:  # after = block input + the MLP term (attention left out)
            torch.testing.assert_close(cap["after"][l] - cap["before"][l], mlp[str(l)][0], atol=1e-5, rtol=1e-5)
            if l:
                torch.testing.assert_close(cap["before"][l], blocks[str(l - 1)][0], atol=1e-6, rtol=1e-6)
        else:  # after = block output
            torch.testing.assert_close(cap["after"][l], blocks[str(l)][0], atol=0, rtol=0)
    if not a.family.parallel:  # the last layer's "after" residual is the model's own prediction
        assert view.lens[-1].after[0]["token_id"] == int(logits.argmax())


@pytest.mark.parametrize("bad", [
    dict(layer=99), dict(layer=0, position=99), dict(layer=0, prompt="  "), dict(layer=0, top=0),
])
def test_memories_bad_input(tiny_by_name, bad):
    lm = tiny_by_name("tiny-llama")
    kwargs = {"prompt": PROMPT, **bad}
    with pytest.raises(EditkitError):
        memories_at(lm, kwargs.pop("prompt"), **kwargs)


def test_keep_and_empty_interventions_are_bitwise_identities(tiny):
    with torch.no_grad():
        base = tiny.model(**encode(tiny, PROMPT)).logits[0]
    assert torch.equal(intervened_logits(tiny, PROMPT, [], "off"), base)
    assert torch.equal(intervened_logits(tiny, PROMPT, [(1, 3), (2, 7), (2, 9)], "keep"), base)


def test_switching_a_memory_off_removes_its_sub_update(tiny):
    """Down-projection output changes by exactly -m_i v_i at the intervened position, nowhere else."""
    a = tiny.adapter
    l, pos = a.n_layers - 2, 4
    cap = capture_ffn(tiny, PROMPT)
    i = int(cap["m"][l, pos].abs().argmax())  # the largest memory there: its sub-update stands above rounding
    m_i = cap["m"][l, pos, i]
    with Hooks() as hooks, torch.no_grad():
        add_hooks(hooks, tiny, {l: [i]}, pos, "off")
        out = hooks.capture({"o": a.down_proj(l)})
        tiny.model(**encode(tiny, PROMPT))
    diff = out["o"][0] - cap["out"][l]
    w = a.down_weight(l)
    # float32 rounding of the two products W m over d_ff terms, the standard bound n eps sum_k |w_k m_k| (a fixed
    # 1e-5 failed on AVX-512 kernels, whose blocking rounds differently; a wrong sub-update is O(|m_i v_i|))
    bound = w.shape[1] * torch.finfo(w.dtype).eps * (w.abs() @ cap["m"][l, pos].abs())
    err = (diff[pos] + m_i * w[:, i]).abs()
    assert (err <= bound).all(), f"max error {err.max():.3g}, bound {bound.min():.3g}"
    assert (m_i * w[:, i]).abs().max() > 10 * bound.max()  # the sub-update stands far above the rounding
    assert diff[:pos].abs().max() == 0  # causal: earlier positions untouched


def test_switch_on_sets_the_layer_max_and_generation_uses_it(tiny_by_name):
    lm = tiny_by_name("tiny-gemma3")
    view = memories_at(lm, PROMPT, 2, top=3)
    mems = [(2, m.index) for m in view.memories]
    r = intervene(lm, PROMPT, mems, "on", max_new_tokens=4)
    top_m = max(m.coefficient for m in memories_at(lm, PROMPT, 2, top=lm.adapter.d_ff).memories)
    assert all(row["coefficient_after"] == pytest.approx(view.coefficient_max) for row in r.memories)
    assert view.coefficient_max == pytest.approx(top_m)
    assert r.before != r.after
    assert type(r).from_json(json.loads(json.dumps(r.to_json()))) == r and len(r.to_frame()) == len(mems)
    with pytest.raises(EditkitError):
        intervene(lm, PROMPT, [(0, 10_000)])
    with pytest.raises(EditkitError):
        intervene(lm, PROMPT, [(0, 1)], mode="maybe")
    assert parse_memory("L3.M17") == (3, 17)


def test_trigger_index_records_true_coefficients(tiny):
    """Recompute m_i on each top trigger prefix alone: it must equal the recorded coefficient."""
    index = triggers.get_index(tiny, 600, seq_len=64, top=5)
    a = tiny.adapter
    assert index.values.shape == (a.n_layers, 5, a.d_ff)
    assert np.all(np.diff(index.values, axis=1) <= 0)  # descending
    for l, i in [(0, 0), (a.n_layers - 1, a.d_ff - 1), (1, 17)]:
        found = triggers.examples(tiny, index, l, i, 3)
        assert len(found) == 3
        for e in found:
            g = e.token_index
            s = int(index.chunk_start[g])
            ids = torch.tensor([index.tokens[s:g + 1].tolist()])
            with Hooks() as hooks, torch.no_grad():
                m = hooks.capture({"m": a.down_proj(l)}, what="input")
                tiny.model(input_ids=ids)
            assert float(m["m"][0, -1, i]) == pytest.approx(e.coefficient, abs=1e-4, rel=1e-4)
            assert tiny.tok.decode([int(index.tokens[g])]) == e.trigger


def test_trigger_cache_round_trip_and_corrupt_rebuild(tiny_by_name, cache):
    lm = tiny_by_name("tiny-neox")
    calls = []
    first = triggers.get_index(lm, 300, seq_len=64, top=4, progress=lambda f, m: calls.append(f))
    assert calls and calls[-1] == pytest.approx(1.0)
    path = first.path
    assert path.exists() and path.parent == cache / "triggers" / "tiny-neox"
    triggers._loaded.clear()
    again = triggers.get_index(lm, 300, seq_len=64, top=4, progress=lambda f, m: pytest.fail("rebuilt"))
    np.testing.assert_array_equal(again.values, first.values)
    np.testing.assert_array_equal(again.where, first.where)
    assert again.meta["model"] == "tiny-neox" and again.meta["n_tokens"] == 300
    path.write_bytes(b"not a zip file")
    triggers._loaded.clear()
    rebuilt = triggers.get_index(lm, 300, seq_len=64, top=4)
    np.testing.assert_array_equal(rebuilt.values, first.values)
    assert triggers.cached_index(lm, 300, seq_len=64, top=4) is not None
    with pytest.raises(EditkitError):
        triggers.examples(lm, rebuilt, 0, 5, top=9)
    with pytest.raises(EditkitError):
        triggers.examples(lm, rebuilt, 0, lm.adapter.d_ff)


def test_geva_analyses_shapes_and_cache(tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    r = geva.analyses(lm, n_positions=20, memories_per_layer=32, index_tokens=400)
    L = lm.adapter.n_layers
    for series in (r.agreement, r.mean_rank, r.compositional, r.fixed_at, r.fixed_by):
        assert len(series) == L
    assert r.fixed_by[-1] == 1.0  # every prediction is fixed at the last layer
    assert sum(r.fixed_at) == pytest.approx(1.0)
    assert all(0 <= x <= 1 for x in r.agreement + r.compositional)
    assert all(1 <= x <= lm.adapter.vocab_size for x in r.mean_rank)
    assert r.n_positions == 20
    again = geva.analyses(lm, n_positions=20, memories_per_layer=32, index_tokens=400,
                          progress=lambda f, m: pytest.fail("recomputed"))
    assert again == r


@pytest.mark.full  # slow on 2 cores; the quick tier keeps cheaper checks of the same code
def test_cli_memories_and_triggers_json(cache):
    env = {**__import__("os").environ, "EDITKIT_CACHE": str(cache)}
    out = subprocess.run([sys.executable, "-m", "editkit", "memories", "--model", "tiny-gpt2", "--prompt", PROMPT,
                          "--layer", "1", "--top", "3", "--norm", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert len(d["memories"]) == 3 and d["norm"] is True
    out = subprocess.run([sys.executable, "-m", "editkit", "triggers", "--model", "tiny-gpt2", "--layer", "1",
                          "--memory", "5", "--top", "3", "--n-tokens", "300", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert len(d["examples"]) == 3 and d["label"] == "L1.M5"
    out = subprocess.run([sys.executable, "-m", "editkit", "triggers", "--model", "tiny-gpt2", "--layer", "1",
                          "--memory", "9999", "--n-tokens", "300", "--json"],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert out.returncode == 2 and "out of range" in out.stderr


def test_page_runs_on_tiny_model():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/ffn_memories.py").run()
    assert not at.exception
    at.button(key="FormSubmitter:mem_form-Inspect").click().run()
    assert not at.exception and not at.error
    assert at.session_state["mem_view"].memories
    at.number_input(key="mem_trig_tokens").set_value(300).run()
    at.button(key="mem_build_index").click().run()
    assert not at.exception and not at.error
    assert any("→" in m.value for m in at.markdown)
    at.button(key="FormSubmitter:mem_int_form-Intervene").click().run()
    assert not at.exception and not at.error
    assert at.session_state["mem_intervention"].mode == "off"
    at.number_input(key="mem_geva_positions").set_value(8)
    at.number_input(key="mem_geva_memories").set_value(16)
    at.button(key="mem_geva_run").click().run()
    assert not at.exception and not at.error
    assert at.session_state["mem_geva"].n_positions == 8
    at.text_input(key="mem_prompt").set_value(" ")
    at.button(key="FormSubmitter:mem_form-Inspect").click().run()
    assert not at.exception
    assert any("empty" in e.value for e in at.error)
    assert at.session_state["mem_view"].memories  # earlier result kept


def test_embedded_model_memories(gemma):
    """Gemma 3 270M: the memories of the last layer at the last token of a known fact render, and the final
    "after FFN" residual reads as the model's answer."""
    view = memories_at(gemma, PROMPT, gemma.adapter.n_layers - 1, top=10)
    assert len(view.memories) == 10 and len(view.lens) == gemma.adapter.n_layers
    assert view.lens[-1].after[0]["token"].strip() == "Paris"
    json.dumps(view.to_json())


# --- Fig. 5 on a constructed case --------------------------------------------------------------------------------
def _deterministic_bigrams(lm, n_tokens: int, n: int) -> list[tuple[int, int]]:
    """Token pairs (A, B) of the indexed corpus text where A occurs at least twice, never ends a chunk, and is
    always followed by B (so A's top trigger example, whichever occurrence it is, is followed by B)."""
    from collections import Counter, defaultdict

    from editkit.data import corpus

    succ, count, ends = defaultdict(set), Counter(), set()
    for chunk in corpus.token_chunks(lm.tok, n_tokens, triggers.DEFAULT_SEQ_LEN):
        for j, t in enumerate(chunk):
            if j + 1 < len(chunk):
                succ[t].add(chunk[j + 1])
                count[t] += 1
            else:
                ends.add(t)
    pairs, used = [], set()
    for a in sorted(succ, key=lambda t: -count[t]):
        b = next(iter(succ[a]))
        if len(succ[a]) == 1 and count[a] >= 2 and a not in ends and a != lm.tok.bos_token_id and \
                a != b and a not in used and b not in used:
            pairs.append((a, b))
            used |= {a, b}
        if len(pairs) == n:
            break
    return pairs


def _implant(lm, pairs, wrong: bool = False) -> list[int]:
    """Layer 0 of a tiny GPT-2, rebuilt so memory i_j is "token A_j -> promote B_j" (the key fires on A_j, the
    value points at B_j's output embedding); `wrong` pairs each key with another pair's B. Attention and position
    embeddings of layer 0 are zeroed, so the MLP reads exactly the normalized token embedding."""
    m = lm.model.transformer
    d = lm.adapter.d_model
    gen = torch.Generator().manual_seed(0)
    E = torch.randn(d, len(pairs), generator=gen)
    E = torch.linalg.qr(E - E.mean(0, keepdim=True))[0]  # orthonormal, zero-mean columns (LayerNorm keeps them)
    memories = list(range(7, 7 + 3 * len(pairs), 3))
    with torch.no_grad():
        m.wpe.weight.zero_()
        m.h[0].attn.c_proj.weight.zero_()
        m.h[0].attn.c_proj.bias.zero_()
        wte = m.wte.weight
        for j, (a, _) in enumerate(pairs):
            wte[a] = 30.0 * E[:, j]  # LayerNorm turns it into sqrt(d) * E_j: the key reads 8 there
        for j, (i, (_, b)) in enumerate(zip(memories, pairs)):
            b = pairs[(j + 1) % len(pairs)][1] if wrong else b
            v = wte[b] - E @ (E.T @ wte[b])  # no component along the keys' directions (A's logits stay 0)
            m.h[0].mlp.c_fc.weight[:, i] = E[:, j]
            m.h[0].mlp.c_fc.bias[i] = 0.0
            m.h[0].mlp.c_proj.weight[i] = 3.0 * v / v.norm()
    return memories


def test_fig5_finds_an_implanted_memory():
    """A memory whose key fires on token A and whose value promotes token B, where B always follows A in the text:
    the trigger index finds A as the key's top trigger, the value's top token is B, so Fig. 5 agrees (rank 1) for
    every implanted memory; pairing each key with another pair's B gives no agreement. The layer's agreement rate
    (all memories of layer 0) is at least the implanted share, far above chance."""
    from editkit.model.loading import load_model

    n_tokens = 1500
    lm = load_model("tiny-gpt2", device="cpu")  # a private copy, rebuilt below
    pairs = _deterministic_bigrams(lm, n_tokens, 12)
    assert len(pairs) == 12
    memories = _implant(lm, pairs)
    index = triggers.build_index(lm, n_tokens)
    rows = geva.value_agreement(lm, index, 0, memories)
    assert [r["memory"] for r in rows] == memories
    assert [int(index.tokens[index.where[0, 0, i]]) for i in memories] == [a for a, _ in pairs]  # keys found A
    assert [r["next_token"] for r in rows] == [b for _, b in pairs]
    assert all(r["agree"] and r["rank"] == 1 for r in rows), rows
    result = geva.compute(lm, n_positions=8, memories_per_layer=lm.adapter.d_ff, index_tokens=n_tokens)
    assert result.agreement[0] >= len(pairs) / lm.adapter.d_ff
    assert result.agreement[0] > 20 / lm.adapter.vocab_size

    wrong = load_model("tiny-gpt2", device="cpu")
    memories = _implant(wrong, pairs, wrong=True)
    rows = geva.value_agreement(wrong, triggers.build_index(wrong, n_tokens), 0, memories)
    assert len(rows) == len(pairs) and not any(r["agree"] for r in rows)


# --- readable value tokens ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,cls", [
    (" Paris", "latin"), ("naïve", "latin"), (" rock-and-roll", "latin"), (" l'amour", "latin"), ("a", "punctuation"),
    (" Москва", "other script"), ("東京", "other script"), (" القاهرة", "other script"),
    ("Sofia Софія", "other script"),
    (" 1984", "number"), (" ,", "punctuation"), ("   ", "space"), ("\ufffd", "fragment"), ("<0xE3>", "fragment"),
    ("abc1", "punctuation"), ("🙂", "punctuation"),
])
def test_token_classes(text, cls):
    from editkit.memories.vocab import classify

    assert classify(text) == cls


def test_readable_marks_spaces_controls_and_fragments():
    from editkit.memories.vocab import readable

    assert readable(" Paris") == "␣Paris"
    assert readable("a\nb\tc") == "a⏎b⇥c"
    assert readable("x\x00") == "x\\x00"
    assert readable("\ufffd") == "\ufffd" and readable("") == "∅"


def test_filtered_top_keeps_true_ranks(tiny):
    """The Latin-only list is exactly the Latin-class tokens of the full ranking, in order, with their ranks."""
    from editkit.memories import vocab
    from editkit.memories.inspect import value_logits

    logits = value_logits(tiny, 1, [3])[0].float()
    got = vocab.filtered_top(tiny, logits, 5, ("latin",))
    v = vocab.vocab(tiny)
    order = logits.argsort(descending=True).tolist()
    want = [(i, r + 1) for r, i in enumerate(order) if v.classes[i] == "latin"][:5]
    assert [(g["token_id"], g["rank"]) for g in got] == want
    assert all(g["class"] == "latin" for g in got)


def test_memories_view_adds_the_filter_without_hiding_tokens(tiny):
    raw = memories_at(tiny, PROMPT, 1, top=3)
    view = memories_at(tiny, PROMPT, 1, top=3, token_filter="latin")
    assert [m.value_tokens for m in view.memories] == [m.value_tokens for m in raw.memories]
    assert all(m.filtered_tokens and m.filtered_tokens[0]["rank"] >= 1 for m in view.memories)
    assert all(not m.filtered_tokens for m in raw.memories)
    with pytest.raises(EditkitError, match="token_filter"):
        memories_at(tiny, PROMPT, 1, token_filter="cjk")


def test_vocabulary_is_built_once_by_concurrent_sessions(tiny_by_name):
    import threading

    from editkit.memories import vocab

    lm = tiny_by_name("tiny-llama")
    vocab._VOCABS.pop((id(lm.tok), lm.adapter.vocab_size), None)
    got = []
    threads = [threading.Thread(target=lambda: got.append(vocab.vocab(lm))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(got) == 4 and all(g is got[0] for g in got)


def test_vocabulary_decodes_in_chunks_so_other_sessions_can_tokenize(tiny_by_name, monkeypatch):
    """A served tokenizer is locked per call (loading.SerialTokenizer): the vocabulary is decoded DECODE_CHUNK ids
    per call, so another session's tokenizing waits for one chunk, not for the whole vocabulary; the texts are
    the same as one call's."""
    from editkit.memories import vocab

    lm = tiny_by_name("tiny-llama")
    monkeypatch.setattr(vocab, "DECODE_CHUNK", 7)
    sizes, decode = [], lm.tok.batch_decode

    class Counting:
        all_special_ids = lm.tok.all_special_ids

        def batch_decode(self, batch):
            sizes.append(len(batch))
            return decode(batch)

    n = lm.adapter.vocab_size
    built = vocab._Vocab(Counting(), n)
    assert max(sizes) <= 7 and sum(sizes) == n and len(sizes) == -(-n // 7)
    assert built.texts == decode([[i] for i in range(n)])
