"""What else several sessions share besides the weights (editkit/model/isolation.py covers the weights): the random
stream of sampled text, caches of weight-dependent results, results defined on the base model (statistics, context
templates), sequential editing, the memories view, and tiny models loaded from two threads at once."""
import threading
import time

import numpy as np
import pytest
import torch

from editkit.editing.context import context_templates
from editkit.editing.run import run_edit
from editkit.editing.stats import second_moment
from editkit.evaluation import SequentialSpec, sequential
from editkit.evaluation.datasets import load_eval_set
from editkit.memories import triggers
from editkit.memories.inspect import value_vectors
from editkit.model import weights
from editkit.model.decoding import SeededTopK
from editkit.model.loading import load_model
from editkit.model.text import last_logits, sample

PROMPTS = ["The Space Needle is located in the city of", "Danielle Darrieux speaks the language"]
REQUEST = {"prompt": "{} is located in the city of", "subject": "The Space Needle", "target_new": "Paris"}


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny-gpt2", device="cpu")  # its own copy: other tests' cached models stay untouched


@pytest.fixture(scope="module")
def delta(lm):
    return run_edit(lm, "rome", dict(REQUEST)).delta


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    return tmp_path


def _base(lm):
    return {n: p.detach().clone() for n, p in lm.model.named_parameters()}


def _assert_base(lm, base):
    for n, p in lm.model.named_parameters():
        assert torch.equal(p, base[n]), n


def _threads(target, n):
    errors = []

    def run(i):
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads)


# --- sampling ---------------------------------------------------------------------------------------------------
def test_seeded_top_k_samples_the_top_k_softmax():
    """Gumbel-max over the top-k log-probabilities is a draw from the top-k softmax: frequencies over 20,000 draws
    match p within 0.015, tokens outside the top k never come, and k = 1 is greedy."""
    scores = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, 3.0]])
    proc = SeededTopK(3, seed=0)
    picks = torch.stack([proc(None, scores).argmax(-1) for _ in range(20000)]).flatten()
    top = [5, 0, 1]  # the three largest scores
    p = torch.softmax(scores[0, top], -1)
    freq = torch.tensor([(picks == t).float().mean() for t in top])
    assert torch.allclose(freq, p, atol=0.015), (freq, p)
    assert set(picks.tolist()) <= set(top)
    greedy = SeededTopK(1, seed=3)
    assert all(int(greedy(None, scores).argmax()) == 5 for _ in range(50))


def test_sampling_is_reproducible_while_other_threads_sample(lm):
    """The same seed gives the same text in every thread at once; torch's global generator is never used."""
    refs = {seed: sample(lm, "The city of", 12, seed=seed) for seed in (0, 1)}
    assert refs[0] != refs[1]  # the seed matters, so mixing streams would be visible
    state = torch.random.get_rng_state()
    seen = [[] for _ in range(4)]
    _threads(lambda i: seen[i].extend(sample(lm, "The city of", 12, seed=i % 2) for _ in range(4)), 4)
    for i, texts in enumerate(seen):
        assert texts == [refs[i % 2]] * 4
    assert torch.equal(torch.random.get_rng_state(), state)


def test_tiny_models_load_identically_from_several_threads():
    ref = {n: _base(load_model(n, device="cpu")) for n in ("tiny-gpt2", "tiny-llama")}
    loaded = [None] * 4
    _threads(lambda i: loaded.__setitem__(i, load_model(("tiny-gpt2", "tiny-llama")[i % 2], device="cpu")), 4)
    for lm_i in loaded:
        want = ref[lm_i.name]
        assert all(torch.equal(p, want[n]) for n, p in lm_i.model.named_parameters())


# --- caches and base-model results ----------------------------------------------------------------------------------
def test_model_key_names_the_weights_this_context_sees(lm, delta):
    other = {n: d * 2 for n, d in delta.items()}
    assert weights.model_key(lm) == lm.name
    with weights.applied(lm, delta):
        key = weights.model_key(lm)
        assert key.startswith(lm.name + "+")
        with weights.unedited():
            assert weights.model_key(lm) == lm.name
        with weights.applied(lm, other):
            assert weights.model_key(lm) not in (lm.name, key)
    with weights.applied(lm, other):
        assert weights.model_key(lm) not in (lm.name, key)
    assert weights.model_key(lm) == lm.name


def test_unedited_computes_on_the_base_weights_inside_an_edit(lm, delta):
    with torch.no_grad():
        ref = last_logits(lm, PROMPTS)
        with weights.applied(lm, delta):
            edited = last_logits(lm, PROMPTS)
            with weights.unedited():
                inner = last_logits(lm, PROMPTS)
            again = last_logits(lm, PROMPTS)
    assert not torch.equal(edited, ref)
    assert torch.equal(inner, ref) and torch.equal(again, edited)


def test_a_session_with_edits_never_writes_the_base_models_cache_entries(lm, delta, cache):
    """A weight-dependent result (a trigger index) is cached per model_key; statistics and context templates are
    the base model's, computed on the base weights even inside an edit."""
    with weights.applied(lm, delta):
        edited_index = triggers.get_index(lm, 300)
        C_inside = second_moment(lm, [0, 1], n_tokens=300)
        templates_inside = context_templates(lm, n=2, length=5)
    assert edited_index.path != triggers.index_path(lm.name, 300, triggers.DEFAULT_SEQ_LEN, triggers.DEFAULT_TOP)
    assert triggers.cached_index(lm, 300) is None  # the base model's entry was not written
    base_index = triggers.get_index(lm, 300)
    assert not np.array_equal(base_index.values, edited_index.values)  # the edit changed the coefficients
    for f in (cache / "stats").rglob("*.safetensors"):
        f.unlink()
    for f in (cache / "templates").glob("*"):
        f.unlink()
    C_base = second_moment(lm, [0, 1], n_tokens=300)
    assert all(torch.equal(C_inside[l], C_base[l]) for l in (0, 1))
    assert context_templates(lm, n=2, length=5) == templates_inside


def test_memory_values_include_the_sessions_edit(lm, delta):
    layer = int(next(iter(delta)).split(".")[2])  # transformer.h.<l>.mlp.c_proj.weight
    base = value_vectors(lm, layer, [0, 1, 2])
    with weights.applied(lm, delta):
        edited = value_vectors(lm, layer, [0, 1, 2])
    W = lm.adapter.down_weight(layer)  # the base weight, math layout (d_model, d_ff)
    dW = delta[next(iter(delta))].T  # Conv1D stores (in, out): math layout is its transpose
    assert torch.allclose(edited, (W + dW)[:, [0, 1, 2]].T, atol=1e-6)
    assert not torch.equal(edited, base)


# --- sequential editing ---------------------------------------------------------------------------------------------
def test_sequential_edits_stay_in_their_own_context(lm):
    """Sequential editing used to write each edit into the shared parameters; now another thread predicting
    during the whole run sees the base model exactly, and the parameters never change."""
    base = _base(lm)
    with torch.no_grad():
        ref = last_logits(lm, PROMPTS)
    stop, seen, errors = threading.Event(), [], []

    def predict():
        try:
            while not stop.is_set():
                with torch.no_grad():
                    seen.append(last_logits(lm, PROMPTS))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=predict)
    t.start()
    try:
        while not seen and not errors:
            time.sleep(0.01)
        out = sequential(lm, "rome", load_eval_set("counterfact", 2), spec=SequentialSpec(ppl_tokens=64),
                         cache=False)
    finally:
        stop.set()
        t.join(timeout=120)
    assert not errors and len(seen) >= 2
    assert all(torch.equal(s, ref) for s in seen)
    _assert_base(lm, base)
    assert [r["edit"] for r in out.rows] == [1, 2]
    assert out.rows[1]["total_relative_norm"] > 0


# --- lazily built registries -----------------------------------------------------------------------------------
def test_method_registry_is_complete_for_concurrent_first_callers(monkeypatch):
    """Two sessions opening Edit & compare at once on a fresh server: both list every method (the registry used to
    be marked loaded before its modules were imported, so the second caller saw it empty; found by the load
    test)."""
    import importlib
    import sys

    from editkit.editing import methods

    want = [m.name for m in methods.all_methods()]
    monkeypatch.setattr(methods, "_REGISTRY", {})
    monkeypatch.setattr(methods, "_loaded", False)
    for name in [n for n in sys.modules if n.startswith("editkit.editing.methods.")]:
        monkeypatch.delitem(sys.modules, name)  # imported (and registered) again, as on a fresh server
        monkeypatch.setattr(methods, name.rsplit(".", 1)[1], sys.modules.get(name), raising=False)
    real = importlib.import_module

    def slow_import(name, *args):
        threading.Event().wait(0.05)  # widens the window a second caller used to fall into
        return real(name, *args)

    monkeypatch.setattr(methods.importlib, "import_module", slow_import)
    seen = [None] * 4
    barrier = threading.Barrier(4)

    def first_call(i):
        barrier.wait(timeout=30)
        seen[i] = [m.name for m in methods.all_methods()]

    _threads(first_call, 4)
    assert all(s == want for s in seen), seen
