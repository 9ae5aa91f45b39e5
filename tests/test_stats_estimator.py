"""The statistics estimator: shrinkage toward the diagonal, snapshots of smaller sizes from one pass, whole split."""
import pytest
import torch

from editkit.core.errors import EditkitError
from editkit.data.corpus import corpus_tokens
from editkit.editing.defaults import load_hparams
from editkit.editing.stats import estimate, key_statistics, provenance, second_moment


def test_shrinkage_keeps_the_diagonal_and_scales_the_rest():
    C = torch.tensor([[4.0, 2.0], [2.0, 9.0]])
    assert estimate(C, 0.0) is C
    S = estimate(C, 0.25)
    assert torch.equal(torch.diagonal(S), torch.diagonal(C))
    assert S[0, 1] == pytest.approx(1.5) and S[1, 0] == pytest.approx(1.5)
    assert torch.equal(estimate(C, 1.0), torch.diag(torch.tensor([4.0, 9.0])))
    with pytest.raises(EditkitError, match="between 0 and 1"):
        estimate(C, 1.5)


def test_shrinkage_is_a_validated_hyperparameter(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    assert load_hparams("rome", lm).mom2_shrinkage == 0.0
    with pytest.raises(EditkitError, match="out of range"):
        load_hparams("memit", lm, {"mom2_shrinkage": 2})


def test_key_statistics_apply_the_estimator(tiny_by_name, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    lm = tiny_by_name("tiny-llama")
    hp = load_hparams("rome", lm, {"mom2_n_tokens": 300, "mom2_shrinkage": 0.4, "layers": [1]})
    C = second_moment(lm, [1], 300)[1]
    got = key_statistics(lm, [1], hp)[1]
    assert torch.allclose(got, 0.6 * C + 0.4 * torch.diag(torch.diagonal(C)))


def test_snapshots_equal_separate_runs(tiny_by_name, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "one"))
    lm = tiny_by_name("tiny-gpt2")
    second_moment(lm, [0, 1], 700, also=(250, 333))
    snap = {m: second_moment(lm, [0, 1], m) for m in (250, 333)}  # served from the snapshots
    rows = {m: provenance(lm, 1, m)["tokens"] for m in (250, 333)}
    assert 333 <= rows[333] < provenance(lm, 1, 700)["tokens"]
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "two"))
    for m in (250, 333):
        alone = second_moment(lm, [0, 1], m)
        for l in (0, 1):
            assert torch.allclose(snap[m][l], alone[l], rtol=1e-5, atol=1e-6)
        assert provenance(lm, 1, m)["tokens"] == rows[m]


def test_more_tokens_than_the_split_uses_all_of_it(tiny_by_name, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    import editkit.data.corpus as corpus

    short = corpus.paragraphs("valid")[:40]  # a short split keeps the test fast
    monkeypatch.setattr(corpus, "paragraphs", lambda split="valid": short)
    monkeypatch.setattr(corpus, "_TOTALS", {})
    lm = tiny_by_name("tiny-gpt2")
    n = corpus_tokens(lm.tok)
    total = sum(len(lm.tok(p, add_special_tokens=False)["input_ids"]) for p in short)
    assert 1000 < total - len(short) <= n <= total  # a paragraph may drop a one-token tail chunk
    calls = []
    second_moment(lm, [0], n + 10 ** 6, progress=lambda f, m: calls.append((f, m)))
    meta = provenance(lm, 0, n + 10 ** 6)
    assert meta["tokens"] >= n  # every token of the split (plus the BOS rows, if the tokenizer adds them)
    assert calls[-1][0] == pytest.approx(1.0) and "left" in calls[len(calls) // 2][1]


def test_entity_mask_marks_capitalised_words_but_not_sentence_starts(tiny_by_name):
    from editkit.editing.stats import entity_mask

    lm = tiny_by_name("tiny-gpt2")
    text = "The Space Needle is in downtown Seattle. It was built by John Graham. New York is big."
    ids = lm.tok(text)["input_ids"]
    marked = [lm.tok.decode([i]) for i, m in zip(ids, entity_mask(lm.tok, ids)) if m]
    words = "".join(lm.tok.decode([i]) for i in ids)
    assert words == text
    # the last token of Space, Needle, Seattle, John, Graham, York; not The / It / New (sentence starts)
    assert len(marked) == 6 and marked[-1].endswith("York")
    assert not any(m.strip() in ("The", "It", "New") for m in marked)


def test_entity_weight_mixes_entity_keys(tiny_by_name, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    lm = tiny_by_name("tiny-llama")
    C = second_moment(lm, [1], 400)[1]
    C_ent = second_moment(lm, [1], 400, positions="entities")[1]
    assert not torch.allclose(C, C_ent) and provenance_rows(lm) < 400
    hp = load_hparams("rome", lm, {"mom2_n_tokens": 400, "mom2_entity_weight": 0.25, "mom2_shrinkage": 0.5,
                                   "layers": [1]})
    mixed = 0.75 * C + 0.25 * C_ent
    assert torch.allclose(key_statistics(lm, [1], hp)[1], estimate(mixed, 0.5))
    with pytest.raises(EditkitError, match="positions"):
        second_moment(lm, [1], 400, positions="nouns")


def provenance_rows(lm):
    from editkit.editing.stats import _load

    return _load(lm, 1, 400, positions="entities")[1]["tokens"]
