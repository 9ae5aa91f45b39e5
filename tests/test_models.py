"""Model loading: tiny models, the cache's atomic build and rebuild, errors, and the embedded model."""
import json
import time

import pytest
import torch

from editkit.cli import main
from editkit.core.cache import MANIFEST, Store
from editkit.core.errors import CacheWarning, EditkitError
from editkit.model.loading import TINY, _load_folder, _tiny, cached_folder, list_models, load_model
from editkit.model.text import top_k


def test_list_models_names_embedded_and_tiny():
    names = [r["name"] for r in list_models()]
    assert names[0] == "gemma-3-270m" and set(TINY) <= set(names)


def test_tiny_models_are_deterministic():
    a, _ = _tiny("tiny-llama")
    b, _ = _tiny("tiny-llama")
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), n


def _build_tiny(out, say):
    model, tok = _tiny("tiny-gpt2")
    model.save_pretrained(out)
    tok.save_pretrained(out)


def test_cache_is_built_once_and_rebuilt_after_truncation(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    calls = []

    def build(out, say):
        calls.append(out)
        _build_tiny(out, say)

    folder = cached_folder("tiny-cache-test", build)
    assert (folder / MANIFEST).exists() and len(calls) == 1
    assert not [p for p in folder.parent.iterdir() if ".tmp-" in p.name]  # temp folder renamed away
    assert cached_folder("tiny-cache-test", build) == folder and len(calls) == 1  # cache hit

    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])  # a half-written file
    messages = []
    folder2 = cached_folder("tiny-cache-test", build, messages.append)
    assert len(calls) == 2 and "rebuilding" in messages[0]
    model, _ = _load_folder(folder2)  # and it loads again
    assert sum(p.numel() for p in model.parameters()) > 0


def test_unreadable_entry_is_set_aside_and_rebuilt(tmp_path, monkeypatch):
    """The one cache helper never deletes an entry its reader fails on: the file is renamed <entry>.unreadable (a
    later failure replaces that copy), a warning names both, and get_or_build builds the entry again."""
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    store = Store("unit-test", version=3)
    path = store.path("tiny", n=1)
    for text in ("{not json", "[1, 2"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        with pytest.warns(CacheWarning, match=r"unit-test.*JSONDecodeError.*unreadable"):
            assert store.get_or_build(path, lambda: {"built": True}) == {"built": True}
        assert path.with_name(path.name + ".unreadable").read_text() == text
        assert json.loads(path.read_text()) == {"built": True}
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".unreadable"]


def test_failed_build_leaves_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))

    def broken(out, say):
        (out / "half.bin").write_bytes(b"x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        cached_folder("broken", broken)
    assert not any((tmp_path / "models").iterdir())


def test_unknown_model_is_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EditkitError, match="could not load model"):
        load_model("no-such-org/no-such-model-xyz")
    with pytest.raises(EditkitError):
        load_model("   ")


def test_cli_predict_and_errors(capsys):
    assert main(["predict", "--model", "tiny-gpt2", "Hello world", "--top", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["predictions"]) == 3
    assert main(["predict", "--model", "tiny-gpt2", "   ", "--json"]) == 2
    assert "error: the prompt is empty" in capsys.readouterr().err


def test_embedded_model_knows_paris_and_loads_from_cache(gemma):
    assert gemma.adapter.family.name == "gemma" and gemma.adapter.n_layers == 18
    assert top_k(gemma, "The Eiffel Tower is located in the city of", 1)[0].token == " Paris"
    assert top_k(gemma, "The Space Needle is in downtown", 1)[0].token == " Seattle"
    start = time.perf_counter()
    again = load_model("gemma-3-270m")  # cache hit: no GGUF conversion
    elapsed = time.perf_counter() - start
    print(f"second load of gemma-3-270m: {elapsed:.1f} s")
    assert torch.equal(again.model.lm_head.weight, gemma.model.lm_head.weight)
