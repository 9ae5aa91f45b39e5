"""The light forward (editkit/model/quick.py) is transformers' forward: the same logits on a tiny random
model of each family it declares (with prompts longer than the sliding windows), the same predictions on the
embedded model, None for what it does not compute, and `editkit predict` answering through it without
importing torch. A deferred load (LM.deferred) builds once, at its first use."""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from editkit.core.errors import EditkitError
from editkit.model.loading import _tiny
from editkit.model.quick import FORWARDS, Decoder, quick_top_k

# tiny-gemma3 and tiny-mistral attend within windows of 64 tokens: the prompts below are longer
QUICK_TINY = ("tiny-llama", "tiny-llama-tied", "tiny-gemma3", "tiny-mistral", "tiny-qwen2", "tiny-qwen3")
PROMPTS = ["The Colosseum is located in the city of", "Apple was founded by", "Paris is the capital of"]


def saved(name, folder, **config):
    """The tiny model `name` (with `config` changed) saved as transformers saves a converted model."""
    model, _ = _tiny(name)
    for key, value in config.items():
        setattr(model.config, key, value)
    model.save_pretrained(folder, safe_serialization=True)
    return model


@pytest.mark.parametrize("name", QUICK_TINY)
def test_the_light_forward_gives_transformers_logits(name, tmp_path):
    model = saved(name, tmp_path)
    decoder = Decoder.of(tmp_path)
    assert decoder is not None and model.config.model_type in FORWARDS
    ids = torch.randint(0, model.config.vocab_size, (1, 100), generator=torch.Generator().manual_seed(0))
    for n in (1, 7, 100):  # one token, a short prompt, one past the window
        with torch.no_grad():
            want = model(ids[:, :n]).logits[0, -1].numpy()
        got = decoder.last_logits(ids[0, :n].tolist())
        scale = float(np.abs(want).max())
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * scale, err_msg=f"{name}, {n} tokens")


def test_a_window_is_honoured(tmp_path):
    """Mistral with a window of 8: a key 8 or more tokens back is out of sight (transformers' logits agree,
    and they differ from full attention's)."""
    model = saved("tiny-mistral", tmp_path, sliding_window=8)
    ids = list(range(5, 45))
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0, -1].numpy()
    decoder = Decoder.of(tmp_path)
    np.testing.assert_allclose(decoder.last_logits(ids), want, atol=2e-5 * float(np.abs(want).max()))
    decoder.windows = [None] * len(decoder.windows)
    assert not np.allclose(decoder.last_logits(ids), want, atol=1e-3 * float(np.abs(want).max()))


@pytest.mark.parametrize("name, config", [
    ("tiny-gpt2", {}),  # a family it does not declare
    ("tiny-llama", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}),
    ("tiny-llama", {"hidden_act": "relu"}),
])
def test_what_it_does_not_compute_is_left_to_transformers(name, config, tmp_path):
    saved(name, tmp_path, **config)
    assert Decoder.of(tmp_path) is None


def test_half_precision_weights_are_left_to_transformers(tmp_path):
    model, _ = _tiny("tiny-llama")
    model.to(torch.bfloat16).save_pretrained(tmp_path, safe_serialization=True)
    assert Decoder.of(tmp_path) is None


def test_a_model_not_converted_gets_no_light_answer():
    assert quick_top_k("tiny-llama", "Paris is the capital of", 3) is None
    assert quick_top_k("/nowhere/model.gguf", "Paris is the capital of", 3) is None


@pytest.mark.parametrize("prompt, k, message", [
    ("", 3, "the prompt is empty"), ("a\x00b", 3, "NUL"), ("Paris", 0, "k >= 1"),
    ("Paris " * 600, 3, "the limit is"),
])
def test_bad_input_is_refused_as_the_full_path_refuses_it(gemma_folder, prompt, k, message):
    with pytest.raises(EditkitError, match=message):
        quick_top_k("gemma-3-270m", prompt, k)


@pytest.fixture(scope="module")
def gemma_folder():
    """The embedded model converted and its tokenizer's fast form built (a full load does both once)."""
    from editkit.model.folders import converted
    from editkit.model.loading import load_model

    if converted("gemma-3-270m") is None or quick_top_k("gemma-3-270m", "a", 1) is None:
        load_model("gemma-3-270m", device="cpu")
    return converted("gemma-3-270m")


def same_either_way(lm, name):
    from editkit.model.text import top_k

    odd = ["  spaces,\tunicode: Köln — 日本語", "<start_of_turn>user\nWho wrote Hamlet?"]
    for prompt in PROMPTS + odd:
        quick = quick_top_k(name, prompt, 5)
        full = top_k(lm, prompt, 5)
        assert [p.token_id for p in quick] == [p.token_id for p in full], prompt
        assert [p.token for p in quick] == [p.token for p in full], prompt
        # float32 noise: transformers' own logits here move by up to 3.4e-5 between a batch of one and of two
        np.testing.assert_allclose([p.logit for p in quick], [p.logit for p in full], atol=2e-4)
        np.testing.assert_allclose([p.prob for p in quick], [p.prob for p in full], atol=1e-4)


@pytest.mark.quick
def test_the_embedded_model_predicts_the_same_either_way(gemma, gemma_folder):
    same_either_way(gemma, "gemma-3-270m")


@pytest.fixture(scope="module")
def smollm2():
    """The second real model (Llama's family), fetched and converted on first use."""
    from editkit.model.loading import load_model

    return load_model("smollm2-135m", device="cpu")


def test_smollm2_predicts_the_same_either_way(smollm2):
    same_either_way(smollm2, "smollm2-135m")


@pytest.mark.quick
def test_predict_answers_without_torch_or_transformers(gemma_folder):
    code = ("import json, sys; from editkit.cli import main; main(['predict', '--model', 'gemma-3-270m', "
            "'Paris is the capital of', '--top', '2', '--json']); "
            "print('imported:', json.dumps([m for m in ('torch', 'transformers') if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          check=True)
    out, heavy = done.stdout.strip().rpartition("imported:")[::2]
    answer = json.loads(out)
    assert json.loads(heavy) == [] and "light forward" in done.stderr
    assert answer["model"] == "gemma-3-270m" and len(answer["predictions"]) == 2


def test_a_deferred_model_loads_once_at_its_first_use(tiny_by_name):
    """LM.deferred: nothing is built until model, tok or adapter is asked for, then once, also when threads
    ask together; other missing attributes stay missing."""
    import threading

    from editkit.model.lm import LM

    built = []

    def build():
        built.append(1)
        return tiny_by_name("tiny-llama")

    lm = LM.deferred("tiny-llama", "tiny-llama", build)
    assert lm.pending and not built and repr(lm) == "LM('tiny-llama', loaded at its first use)"
    with pytest.raises(AttributeError):
        _ = lm.not_an_attribute
    threads = [threading.Thread(target=lambda: lm.adapter) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert built == [1] and not lm.pending and lm.model is tiny_by_name("tiny-llama").model
    assert lm.runner.hidden is not None and lm.device.type == "cpu"


@pytest.mark.quick
def test_editkit_load_defers_and_predicts_the_same(gemma, gemma_folder):
    import editkit

    lm = editkit.load("gemma-3-270m")
    assert lm.pending and lm.name == gemma.name
    light = editkit.predict(lm, PROMPTS[0], k=3)
    assert lm.pending  # answered without loading the model
    full = editkit.predict(gemma, PROMPTS[0], k=3)
    assert [p.token_id for p in light] == [p.token_id for p in full] and light.model == full.model
    assert editkit.logit_lens(lm, PROMPTS[0], k=3).to_frame().equals(
        editkit.logit_lens(gemma, PROMPTS[0], k=3).to_frame())
    assert not lm.pending



def test_half_precision_and_other_models_load_at_once(gemma_folder, monkeypatch):
    """Only a converted float32 model is deferred: half precision (and anything not converted) loads now."""
    import editkit
    import editkit.api as api

    calls = []
    monkeypatch.setattr(api, "load_model", lambda name, **kw: calls.append((name, kw["dtype"])) or "loaded")
    assert editkit.load("gemma-3-270m", dtype="bfloat16") == "loaded"
    assert editkit.load("tiny-llama") == "loaded"
    assert editkit.load("gemma-3-270m", dtype="float32").pending and len(calls) == 2
    assert calls == [("gemma-3-270m", "bfloat16"), ("tiny-llama", None)]


def test_a_deferred_load_refuses_at_once_what_a_load_refuses(gemma_folder, monkeypatch):
    """A bad device, or weights that do not fit, are refused by editkit.load itself, not at the first use."""
    import editkit
    from editkit.model import ram

    with pytest.raises(EditkitError, match="device 'cuda'|CUDA"):
        editkit.load("gemma-3-270m", device="cuda:7")
    monkeypatch.setattr(ram, "available", lambda device: (100 << 20, "RAM"))
    with pytest.raises(EditkitError, match="GB"):
        editkit.load("gemma-3-270m")
