"""Edit metrics on hand-computed cases, the shipped evaluation sets, and batch / sequential evaluation on tiny
models (resumable, base weights restored)."""
import json
import math

import pytest
import torch

from editkit.errors import EditkitError
from editkit.evaluation import load_eval_set
from editkit.evaluation.evaluate import evaluate
from editkit.evaluation.metrics import (compare, harmonic_mean, idf_table, mean_ci, n_gram_entropy,
                                        n_gram_entropy_one, tfidf_cosine, token_agreement)
from editkit.evaluation.sequential import sequential


def test_n_gram_entropy_by_hand():
    # "a b a b": bigrams (a,b) x2, (b,a) x1 -> H2 = -(2/3 log2 2/3 + 1/3 log2 1/3) = 0.9183
    # trigrams (a,b,a), (b,a,b) -> H3 = 1; weighted mean = (2/3 * 0.9183 + 4/3 * 1) / 2
    h2 = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    assert n_gram_entropy_one("a b a b") == pytest.approx((2 / 3 * h2 + 4 / 3 * 1.0) / 2)
    assert n_gram_entropy_one("same same same same") == 0.0  # one bigram, one trigram: no surprise
    assert n_gram_entropy(["a b a b", "same same same same"]) == pytest.approx((2 / 3 * h2 + 4 / 3) / 4)
    # punctuation is a token: "x, y" has bigrams (x ,) (, y)
    assert n_gram_entropy_one("x, y") == pytest.approx((2 / 3 * 1.0 + 4 / 3 * 0.0) / 2)


def test_tfidf_cosine_by_hand():
    docs = ["paris france city", "rome italy city", "london england city"]
    idf = idf_table(docs)
    assert idf["city"] == pytest.approx(math.log(4 / 4) + 1)  # in every document
    assert idf["paris"] == pytest.approx(math.log(4 / 2) + 1)
    assert tfidf_cosine("paris france", "paris france", idf) == pytest.approx(1.0)
    assert tfidf_cosine("paris france", "rome italy", idf) == 0.0
    assert tfidf_cosine("unknown words", "paris", idf) == 0.0
    # "paris city" vs "city": vectors (idf_p, idf_c) and (0, idf_c)
    p, c = idf["paris"], idf["city"]
    assert tfidf_cosine("Paris city", "city", idf) == pytest.approx(c / math.sqrt(p * p + c * c))


def test_compare_harmonic_mean_and_intervals():
    nll_new, nll_true = [0.1, 2.0], [1.0, 1.0]
    ok, mag = compare(nll_new, nll_true, new_should_win=True)
    assert ok == 0.5
    assert mag == pytest.approx(((math.exp(-0.1) - math.exp(-1)) + (math.exp(-2) - math.exp(-1))) / 2)
    ok, _ = compare(nll_new, nll_true, new_should_win=False)
    assert ok == 0.5
    assert harmonic_mean([1.0, 0.5]) == pytest.approx(2 / 3)
    assert harmonic_mean([1.0, 0.0]) == 0.0
    m, ci = mean_ci([1.0, 0.0, 1.0, 0.0])
    assert m == 0.5 and ci == pytest.approx(1.96 * math.sqrt(1 / 3 / 4))
    assert token_agreement([[1, 2], [3]], [[1, 5], [3]]) == pytest.approx(2 / 3)


def test_eval_sets_load_by_name():
    cf = load_eval_set("counterfact", 3)
    assert len(cf) == 3 and cf[0].request.target_true and len(cf[0].request.paraphrase_prompts) == 2
    assert cf[0].reference_text and cf[0].request.target_new.strip() in cf[0].reference_text
    val = load_eval_set("counterfact-val", 2)
    assert val[0].locality and val[0].request.paraphrase_prompts
    z = load_eval_set("zsre", 2)
    assert z[0].request.rewrite.startswith("What") and z[0].locality
    assert len(load_eval_set("counterfact")) == 500
    with pytest.raises(EditkitError, match="unknown evaluation set"):
        load_eval_set("nope")


def test_evaluate_runs_and_resumes(tiny_by_name, tmp_path):
    lm = tiny_by_name("tiny-llama")
    snap = {n: p.detach().clone() for n, p in lm.model.named_parameters()}
    out = evaluate(lm, ["rome", "memit"], n=2, batch=2, n_gen=1, gen_tokens=8, out_dir=tmp_path,
                   hparams={"rome": {"v_num_grad_steps": 3}, "memit": {"v_num_grad_steps": 3}})
    assert all(torch.equal(p, snap[n]) for n, p in lm.model.named_parameters())
    for method in ("rome", "memit"):
        t = out["methods"][method]
        assert t["records"] == 2
        for key in ("pre_efficacy", "post_efficacy", "post_fluency", "post_consistency", "post_reliability"):
            assert t[key]["mean"] is not None, key
        lines = open(t["results_file"]).read().splitlines()
        assert len(lines) == 2 and json.loads(lines[0])["metrics"]["post_fluency"] > 0
    again = evaluate(lm, ["rome", "memit"], n=2, batch=2, n_gen=1, gen_tokens=8, out_dir=tmp_path,
                     hparams={"rome": {"v_num_grad_steps": 3}, "memit": {"v_num_grad_steps": 3}})
    assert again["methods"]["rome"]["post_efficacy"] == out["methods"]["rome"]["post_efficacy"]
    for method in ("rome", "memit"):  # nothing recomputed: the files did not grow
        assert len(open(again["methods"][method]["results_file"]).read().splitlines()) == 2


def test_sequential_restores_base_weights(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    snap = {n: p.detach().clone() for n, p in lm.model.named_parameters()}
    out = sequential(lm, "rome", load_eval_set("counterfact", 3), hparams={"v_num_grad_steps": 3}, ppl_tokens=64)
    assert [r["edit"] for r in out["rows"]] == [1, 2, 3]
    norms = [r["max_relative_norm"] for r in out["rows"]]
    assert all(n > 0 for n in norms) and out["base_perplexity"] > 1
    assert all(torch.equal(p, snap[n]) for n, p in lm.model.named_parameters())


def test_cli_evaluate(capsys, tmp_path):
    from editkit.cli import main
    assert main(["evaluate", "--model", "tiny-gpt2", "--methods", "rome", "--n", "1", "--gen-tokens", "5",
                 "--out", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["methods"]["rome"]["records"] == 1
    assert main(["evaluate", "--model", "tiny-gpt2", "--methods", "rome", "--set", "nope", "--json"]) == 2
    assert "unknown evaluation set" in capsys.readouterr().err
