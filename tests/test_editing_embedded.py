"""Editing the embedded Gemma 3 270M: the acceptance cases of the editing engine."""
import pytest

from editkit.editing.defaults import load_hparams
from editkit.editing.requests import parse_requests
from editkit.editing.run import run_edit
from editkit.editing.stats import second_moment
from editkit.model.scoring import score_targets
from editkit.model.text import top_k
from editkit.model.weights import applied


@pytest.fixture(scope="module")
def stats(gemma):
    layers = sorted({l for m in ("rome", "memit", "pmet") for l in load_hparams(m, gemma).layers})
    return second_moment(gemma, layers, load_hparams("rome", gemma).mom2_n_tokens)  # one pass, cached


def _p(lm, prompt):
    new, true = score_targets(lm, [prompt, prompt], [" English", " French"])
    return new.prob, true.prob


def test_rome_darrieux_speaks_english(gemma, stats):
    request = parse_requests({"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux",
                              "target_new": "English", "target_true": "French"})
    rewrite, paraphrase = request[0].rewrite, "Where Danielle Darrieux is from, people speak the language of"
    assert _p(gemma, rewrite)[1] > _p(gemma, rewrite)[0]  # before: French wins
    result = run_edit(gemma, "rome", request)
    print(f"ROME edit: {result.seconds:.1f} s, ||dW||/||W|| = "
          f"{result.info['requests'][0]['relative_norm']:.4f}")
    with applied(gemma.model, result.delta):
        for prompt in (rewrite, paraphrase):
            new, true = _p(gemma, prompt)
            assert new > true, (prompt, new, true)
        assert top_k(gemma, "The Eiffel Tower is located in the city of", 1)[0].token == " Paris"
    assert top_k(gemma, rewrite, 1)[0].token == " French"  # reverted


@pytest.mark.parametrize("method", ["memit", "pmet"])
def test_ten_request_batch_reaches_efficacy(gemma, stats, method):
    """Acceptance: a 10-request batch of CounterFact counterfactuals, edited at once, has efficacy >= 0.9
    (P(target_new) > P(target_true) on the rewrite prompt) on the embedded model; the base weights come back."""
    from editkit.core.paths import DATA

    batch = parse_requests(DATA / "counterfact" / "counterfact_500.json")[:10]

    def wins():
        scores = score_targets(gemma, [r.rewrite for r in batch for _ in (0, 1)],
                               [t for r in batch for t in (r.target_new, r.target_true)])
        return [scores[2 * i].logprob > scores[2 * i + 1].logprob for i in range(len(batch))]

    before = wins()
    result = run_edit(gemma, method, batch)
    print(f"{method}: {result.seconds:.1f} s, target reached {result.info['target_reached']}")
    with applied(gemma.model, result.delta):
        after = wins()
    assert sum(after) / len(batch) >= 0.9, after
    assert sum(before) <= 2  # they are counterfactuals: the edit did the work
    assert wins() == before
