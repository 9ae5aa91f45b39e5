"""Edit metrics on hand-computed cases (pure functions, no model)."""
import math

import pytest

from editkit.editing.requests import EditRequest
from editkit.evaluation.datasets import EvalRecord
from editkit.evaluation.evaluate import summarize
from editkit.evaluation.measure import metrics_of, record_metrics
from editkit.evaluation.metrics import (
    EditMetrics,
    compare,
    harmonic_mean,
    idf_table,
    mean_ci,
    n_gram_entropy,
    n_gram_entropy_one,
    tfidf_cosine,
    token_agreement,
)


def test_n_gram_entropy_by_hand():
    # "a b a b": bigrams (a,b) x2, (b,a) x1 -> H2 = -(2/3 log2 2/3 + 1/3 log2 1/3) = 0.9183
    # trigrams (a,b,a), (b,a,b) -> H3 = 1; weighted mean = (2/3 * 0.9183 + 4/3 * 1) / 2
    h2 = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    assert n_gram_entropy_one("a b a b") == pytest.approx((2 / 3 * h2 + 4 / 3 * 1.0) / 2)
    assert n_gram_entropy_one("same same same same") == 0.0  # one bigram, one trigram: no surprise
    assert n_gram_entropy(["a b a b", "same same same same"]) == pytest.approx((2 / 3 * h2 + 4 / 3) / 4)
    # punctuation is a token: "x, y" has bigrams (x ,) (, y) and one trigram
    assert n_gram_entropy_one("x, y") == pytest.approx((2 / 3 * 1.0 + 4 / 3 * 0.0) / 2)
    # four distinct words: 3 bigrams (log2 3), 2 trigrams (1 bit)
    assert n_gram_entropy_one("the cat sat down") == pytest.approx((2 / 3 * math.log2(3) + 4 / 3) / 2)
    assert math.isnan(n_gram_entropy([]))


def test_tfidf_cosine_by_hand():
    docs = ["paris france city", "rome italy city", "london england city"]
    idf = idf_table(docs)
    assert idf["city"] == pytest.approx(math.log(4 / 4) + 1)  # in every document
    assert idf["paris"] == pytest.approx(math.log(4 / 2) + 1)
    assert tfidf_cosine("paris france", "paris france", idf) == pytest.approx(1.0)
    assert tfidf_cosine("paris france", "rome italy", idf) == 0.0
    assert tfidf_cosine("unknown words", "paris", idf) == 0.0
    # "paris city" vs "city": vectors (idf_p, idf_c) and (0, idf_c); case-insensitive
    p, c = idf["paris"], idf["city"]
    assert tfidf_cosine("Paris city", "city", idf) == pytest.approx(c / math.sqrt(p * p + c * c))
    # term counts: "paris paris city" = (2 idf_p, idf_c) against "paris" = (idf_p, 0)
    assert tfidf_cosine("paris paris city", "paris", idf) == pytest.approx(2 * p / math.sqrt(4 * p * p + c * c))


def test_compare_harmonic_mean_and_intervals():
    nll_new, nll_true = [0.1, 2.0], [1.0, 1.0]
    ok, mag = compare(nll_new, nll_true, new_should_win=True)
    assert ok == 0.5
    assert mag == pytest.approx(((math.exp(-0.1) - math.exp(-1)) + (math.exp(-2) - math.exp(-1))) / 2)
    ok, mag2 = compare(nll_new, nll_true, new_should_win=False)
    assert ok == 0.5 and mag2 == pytest.approx(-mag)
    assert harmonic_mean([1.0, 0.5]) == pytest.approx(2 / 3)
    assert harmonic_mean([1.0, 0.5, 0.25]) == pytest.approx(3 / (1 + 2 + 4))
    assert harmonic_mean([1.0, 0.0]) == 0.0
    m, ci = mean_ci([1.0, 0.0, 1.0, 0.0])
    assert m == 0.5 and ci == pytest.approx(1.96 * math.sqrt(1 / 3 / 4))
    assert token_agreement([[1, 2], [3]], [[1, 5], [3]]) == pytest.approx(2 / 3)


def _meas(rewrite, paraphrase, neighborhood, acc=(1.0,), loc=None, texts=()):
    """A measurement as measure.measure returns it, from (nll_new, nll_true) pairs."""
    def g(pairs, a=()):
        return {"nll_new": [p[0] for p in pairs], "nll_true": [p[1] for p in pairs],
                "acc_new": list(a) or [0.0] * len(pairs)}
    out = {"rewrite": g(rewrite, acc), "paraphrase": g(paraphrase), "neighborhood": g(neighborhood),
           "generations": [{"prompt": "", "text": t} for t in texts]}
    if loc is not None:
        out["locality_argmax"], out["locality_acc"] = loc
    return out


def test_record_metrics_from_hand_made_log_probs():
    req = EditRequest("The mother tongue of {} is", "Danielle Darrieux", "English", "French",
                      paraphrase_prompts=["a", "b"], neighborhood_prompts=["c", "d"], generation_prompts=["g"])
    rec = EvalRecord(req, reference_text="english language", locality=[("c", " French")])
    idf = idf_table(["english language", "french people"])
    # post: new wins on the rewrite (0.2 < 1.5), on 1 of 2 paraphrases; true wins on 1 of 2 neighbors
    post = _meas([(0.2, 1.5)], [(0.5, 1.0), (2.0, 1.0)], [(3.0, 0.1), (0.1, 3.0)],
                 loc=([[7, 8]], [0.5]), texts=["english language english language"])
    pre = _meas([(1.5, 0.2)], [(1.0, 0.5), (2.0, 1.0)], [(3.0, 0.1), (3.0, 0.1)], acc=(0.0,),
                loc=([[7, 9]], [1.0]), texts=["french people"])
    m = metrics_of(post, rec, idf)
    assert isinstance(m, EditMetrics) and set(m.to_dict()) >= {"efficacy", "score", "fluency", "consistency"}
    assert m.efficacy == 1.0 and m.efficacy_magnitude == pytest.approx(math.exp(-0.2) - math.exp(-1.5))
    assert m.generalization == 0.5 and m.specificity == 0.5
    assert m.specificity_magnitude == pytest.approx(((math.exp(-0.1) - math.exp(-3)) +
                                                     (math.exp(-3) - math.exp(-0.1))) / 2)
    assert m.score == pytest.approx(harmonic_mean([1.0, 0.5, 0.5]))
    assert m.consistency == pytest.approx(1.0) and m.reliability == 1.0
    assert m.portability is None
    flat = record_metrics(pre, post, rec, idf)
    assert flat["pre_efficacy"] == 0.0 and flat["pre_score"] == 0.0 and flat["post_efficacy"] == 1.0
    assert flat["pre_consistency"] == 0.0 and flat["locality"] == 0.5  # argmax 8 -> 9 at one of two positions
    # no reference text / no generations: unavailable, not zero
    bare = metrics_of(_meas([(0.2, 1.5)], [], []), EvalRecord(req), None)
    assert bare.consistency is None and bare.fluency is None and bare.generalization is None and bare.score is None


def test_zsre_metrics_are_token_accuracies():
    req = EditRequest("What university did {} attend?", "Watts Humphrey", "University of Michigan")
    rec = EvalRecord(req, locality=[("nq question: x", " Hugo Weaving")], kind="zsre")
    meas = _meas([], [], [], acc=(0.75,), loc=([[1, 2]], [0.5]))
    meas["paraphrase"]["acc_new"] = [0.25]
    m = metrics_of(meas, rec, None)
    assert (m.efficacy, m.generalization, m.specificity) == (0.75, 0.25, 0.5)
    assert m.efficacy_magnitude is None and m.score == pytest.approx(harmonic_mean([0.75, 0.25, 0.5]))


def test_summarize_scales_and_table_score():
    rows = [{"seconds": 2.0, "metrics": {"post_efficacy": 1.0, "post_generalization": 0.5, "post_specificity": 1.0,
                                         "post_consistency": None}},
            {"seconds": 4.0, "metrics": {"post_efficacy": 1.0, "post_generalization": 0.5, "post_specificity": 0.0,
                                         "post_consistency": None}}]
    s = summarize(rows)
    assert s["records"] == 2 and s["seconds_per_request"] == 3.0
    assert s["post_efficacy"] == {"mean": 100.0, "ci95": 0.0}
    assert s["post_specificity"]["mean"] == 50.0
    assert s["post_table_score"] == pytest.approx(harmonic_mean([100.0, 50.0, 50.0]))
    assert s["post_consistency"] == {"mean": None, "ci95": None} and s["pre_table_score"] is None


def test_summarize_pairs_the_change_per_record():
    """change_<rate> is the mean of post - pre over the records that have both, with the paired interval: two
    records losing 1 and 0 of a rate give -50 +- 1.96 * sd / sqrt(2)."""
    rows = [{"seconds": 1.0, "metrics": {"pre_specificity": 1.0, "post_specificity": 0.0, "post_efficacy": 1.0}},
            {"seconds": 1.0, "metrics": {"pre_specificity": 0.5, "post_specificity": 0.5, "post_efficacy": 1.0}}]
    s = summarize(rows)
    assert s["change_specificity"]["mean"] == pytest.approx(-50.0)
    assert s["change_specificity"]["ci95"] == pytest.approx(100 * 1.96 * (0.5 ** 0.5) / 2 ** 0.5)
    assert "change_efficacy" not in s  # no pre value: no change
