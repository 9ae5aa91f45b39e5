"""A warm load reads what it needs: the parameter count from the weights' safetensors headers (equal to the
model's own count, shards and tied weights too), and a converted folder's tokenizer from its checked fast form
(the same ids, offsets, decodings, special tokens and settings as the slow load; a form that differs is never
used)."""
import json

import pytest

import editkit.model.tokenizer_cache as cache
from editkit.core.cache import MANIFEST
from editkit.core.errors import EditkitError
from editkit.core.timing import phase, recording
from editkit.model.loading import (
    TINY,
    estimate,
    load_model,
    tiny_config,
    tiny_tokenizer,
)
from editkit.model.ram import (
    count_parameters,
    safetensors_files,
    safetensors_parameters,
)

PROMPT = "The Colosseum is located in the city of"


@pytest.mark.parametrize("name", TINY)
def test_the_headers_count_what_the_model_holds(name, tmp_path, tiny_by_name):
    lm = tiny_by_name(name)
    lm.model.save_pretrained(tmp_path)
    held = sum(p.numel() for p in lm.model.parameters())  # tied weights once
    assert safetensors_parameters(safetensors_files(tmp_path)) == held == count_parameters(tiny_config(name))


def test_shards_and_a_folder_estimate_without_building_the_model(tmp_path, monkeypatch, tiny_by_name):
    lm = tiny_by_name("tiny-llama-tied")
    lm.model.save_pretrained(tmp_path, max_shard_size="100KB")
    lm.tok.save_pretrained(tmp_path)
    files = safetensors_files(tmp_path)
    assert len(files) > 2 and (tmp_path / "model.safetensors.index.json").exists()
    held = sum(p.numel() for p in lm.model.parameters())
    assert safetensors_parameters(files) == held

    def no_build(*args, **kwargs):
        raise AssertionError("the count should come from the headers")

    monkeypatch.setattr("editkit.model.loading.count_parameters", no_build)
    assert estimate(str(tmp_path))["parameters"] == held
    (tmp_path / files[0].name).write_bytes(b"\xff" * 16)  # a damaged shard: one clear line, no traceback
    with pytest.raises(EditkitError, match="is not a readable safetensors file"):
        estimate(str(tmp_path))


def test_without_local_weights_the_config_counts(tmp_path):
    """A folder with a config and no safetensors (a hub id not downloaded yet is the same case) is counted on
    the meta device from its config, as before."""
    tiny_config("tiny-gpt2").save_pretrained(tmp_path)
    assert safetensors_files(tmp_path) is None
    assert estimate(str(tmp_path))["parameters"] == count_parameters(tiny_config("tiny-gpt2"))


def test_phases_are_recorded_only_when_asked():
    with phase("nothing"):  # no recording: nothing kept anywhere
        pass
    with recording() as phases:
        load_model("tiny-gpt2", device="cpu")
    names = [p[0] for p in phases]
    assert names[0] == "config" and {"tokenizer", "weights", "check"} <= set(names)
    assert all(wall >= 0 and cpu >= 0 for _, wall, cpu in phases)


@pytest.fixture
def converted(tmp_path, monkeypatch):
    """A folder as editkit converts one, whose tokenizer class builds itself in its own __init__ (Gemma's), on
    the tiny tokenizer's vocabulary and merges; the fast forms go to a fresh cache."""
    from transformers import GemmaTokenizer

    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))
    model = json.loads(tiny_tokenizer().backend_tokenizer.to_str())["model"]
    vocab = dict(model["vocab"], **{t: len(model["vocab"]) + i for i, t in enumerate(
        ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"])})
    folder = tmp_path / "converted"
    GemmaTokenizer(vocab=vocab, merges=[tuple(m) if isinstance(m, list) else tuple(m.split(" "))
                                        for m in model["merges"]], add_bos_token=True).save_pretrained(folder)
    return folder


def test_the_fast_form_is_the_slow_tokenizer(converted, monkeypatch):
    said = []
    first = cache.fast_tokenizer(converted, said.append)  # builds and checks the fast form; the slow load
    assert said == ["writing the tokenizer's fast form (once)"]
    memo = json.loads((cache.cache_path(converted) / cache.MEMO).read_text())
    assert memo["same"] and memo["class"] == "GemmaTokenizer"

    def slow(folder):
        raise AssertionError("a warm load reads the fast form only")

    monkeypatch.setattr(cache, "slow_tokenizer", slow)
    fast = cache.fast_tokenizer(converted, said.append)
    assert type(fast) is type(first) and fast is not first and len(said) == 1
    assert fast.padding_side == "left" == first.padding_side  # the class's own setting, kept
    ids = ("pad_token_id", "bos_token_id", "eos_token_id")
    assert [getattr(fast, i) for i in ids] == [getattr(first, i) for i in ids]
    texts = cache.check_texts()
    assert cache.differences(first, fast, texts) is None
    assert fast(PROMPT)["input_ids"][0] == fast.bos_token_id  # <bos> first, as the slow load adds it
    batch = fast([PROMPT, "short"], padding=True, padding_side="left")
    assert batch["input_ids"][1][0] == fast.pad_token_id and batch["attention_mask"][1][0] == 0


def test_a_fast_form_that_differs_is_never_used(converted):
    slow = cache.slow_tokenizer(converted)
    cached = cache.cache_path(converted)
    cache.fast_tokenizer(converted)
    data = json.loads((cached / "tokenizer.json").read_text())
    data["model"]["merges"] = data["model"]["merges"][:-200]  # the last merges lost: longer words split more
    (cached / "tokenizer.json").write_text(json.dumps(data))
    fast = cache.load_fast_form(cached, converted, json.loads((cached / cache.MEMO).read_text()))
    assert cache.differences(slow, fast, cache.check_texts()) is not None  # the check sees it
    # A fast form checked unequal when it was built is not used; the load says why and reads the folder
    # slowly.
    memo = json.loads((cached / cache.MEMO).read_text())
    (cached / cache.MEMO).write_text(json.dumps(dict(memo, same=False, why="the ids of 'x' differ")))
    (cached / MANIFEST).write_text(json.dumps({"files": {  # the folder stays whole (else it would be rebuilt)
        p.name: p.stat().st_size for p in cached.iterdir() if p.name != MANIFEST}}))
    said = []
    again = cache.fast_tokenizer(converted, said.append)
    assert said == ["tokenizer: its fast form differs from the slow load (the ids of 'x' differ); loading it the "
                    "slow way"]
    assert cache.differences(slow, again, cache.check_texts()) is None


def test_tokenizers_alone_is_checked_before_a_light_answer_reads_it(converted):
    """The memo also says whether `tokenizers` alone gives the class's ids and decodings (model/quick.py reads
    it so); a fast form whose post-processor or decoder lives only in the class is not read that way."""
    slow = cache.slow_tokenizer(converted)
    cache.fast_tokenizer(converted)
    cached = cache.cache_path(converted)
    memo = json.loads((cached / cache.MEMO).read_text())
    assert memo["raw_same"] and memo["raw_why"] == ""
    assert cache.raw_tokenizer(converted).encode(PROMPT).ids == slow(PROMPT)["input_ids"]
    data = json.loads((cached / "tokenizer.json").read_text())
    shout = {"type": "Replace", "pattern": {"String": "e"}, "content": "E"}
    cases = (("post_processor", None, "the ids of"), ("decoder", shout, "the decoding of token"))
    for key, change, why in cases:
        edited = cached.parent / f"{key}.json"
        edited.write_text(json.dumps(dict(data, **{key: change})))
        assert cache.raw_differences(slow, edited, cache.check_texts()).startswith(why)
    (cached / cache.MEMO).write_text(json.dumps(dict(memo, raw_same=False, raw_why="the ids of 'x'")))
    (cached / MANIFEST).write_text(json.dumps({"files": {
        p.name: p.stat().st_size for p in cached.iterdir() if p.name != MANIFEST}}))
    assert cache.raw_tokenizer(converted) is None


def test_a_cache_that_cannot_be_written_loads_the_slow_way(converted, monkeypatch):
    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(type(cache.TOKENIZERS), "build_folder", read_only)  # every Store, in this test
    said = []
    tok = cache.fast_tokenizer(converted, said.append)
    assert said and said[0].startswith("tokenizer: its fast form cannot be written (")
    assert cache.differences(cache.slow_tokenizer(converted), tok, cache.check_texts(facts=20, lines=20)) is None


def test_a_changed_source_gets_a_new_fast_form(converted):
    before = cache.cache_path(converted)
    config = json.loads((converted / "tokenizer_config.json").read_text())
    (converted / "tokenizer_config.json").write_text(json.dumps(dict(config, model_max_length=512)))
    assert cache.cache_path(converted) != before
    tok = cache.fast_tokenizer(converted)
    assert tok.model_max_length == 512 == cache.fast_tokenizer(converted).model_max_length


@pytest.mark.full
@pytest.mark.parametrize("name", ["gemma-3-270m", "smollm2-135m"])
def test_a_shipped_models_fast_tokenizer_gives_the_same_ids_and_predictions(name):
    """The shipped models' fast forms against transformers' own load of the converted folder: every known
    fact, 3,000 lines of WikiText-2 and the edge cases tokenize the same (ids, offsets, tokens, decodings,
    padding, special tokens, settings), and the model predicts the same next tokens through either."""
    from dataclasses import replace

    from editkit.model.loading import SerialTokenizer, shipped_folder
    from editkit.model.text import top_k

    folder = shipped_folder(name)
    slow = cache.slow_tokenizer(folder)
    cache.fast_tokenizer(folder)  # built and checked on first use
    assert json.loads((cache.cache_path(folder) / cache.MEMO).read_text())["same"]
    lm = load_model(name, device="cpu")  # its tokenizer: the fast form
    fast = lm.tok._tok
    assert type(fast) is type(slow) and fast is not slow
    assert cache.differences(slow, fast, cache.check_texts(facts=2000, lines=3000)) is None
    before = replace(lm, tok=SerialTokenizer(slow))
    for prompt in [PROMPT] + [t for t in cache.check_texts(facts=20, lines=0) if t.strip()][:30]:
        assert top_k(lm, prompt, 5) == top_k(before, prompt, 5), prompt


def test_a_hub_id_in_the_local_cache_is_counted_from_its_headers(tmp_path, monkeypatch, tiny_by_name):
    """A hub id's weights found in the local Hugging Face cache (its documented layout: refs/main names the
    snapshot) are counted from their headers; one not downloaded has no files here."""
    import huggingface_hub.constants

    lm = tiny_by_name("tiny-gpt2")
    snapshot = tmp_path / "models--someone--tiny" / "snapshots" / "abc123"
    lm.model.save_pretrained(snapshot)
    (tmp_path / "models--someone--tiny" / "refs").mkdir()
    (tmp_path / "models--someone--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    files = safetensors_files("someone/tiny")
    assert files == [snapshot / "model.safetensors"]
    assert safetensors_parameters(files) == sum(p.numel() for p in lm.model.parameters())
    assert safetensors_files("someone/not-downloaded") is None
