"""Generation-based efficacy (QAEdit): greedy continuations must say the new target and no longer the true one."""
import pytest

from editkit.editing.requests import EditRequest
from editkit.evaluation.datasets import EvalRecord
from editkit.evaluation.measure import greedy, measure, metrics_of
from editkit.evaluation.metrics import answer_line, generation_success, mentions
from editkit.model.text import greedy as text_greedy


@pytest.mark.parametrize("text,new,true,ok", [
    (" English. She was born in Paris.", " English", " French", True),
    (" French, like her parents.", " English", " French", False),  # still the old answer
    (" English and French.", " English", " French", False),  # both: not a clean edit
    (" a language spoken in England.", " English", " French", False),  # no mention of the new target
    (" english", " English", " French", True),  # case does not matter
    (" Englishman by birth", " English", " French", False),  # whole words only
    (" North America, not Europe", " North America", " America", True),  # true target inside the new one
    (" America.", " North America", " America", False),
    ("\n\nEnglish.", " English", " French", True),  # leading blank lines are skipped
    (" the piano.\nFrench is her mother tongue", " piano", " French", True),  # only the first line answers
    (" New  York City", " New York", " London", True),  # any whitespace between the words
    (" English", " English", None, True),  # no true target (zsRE): only the new one is needed
])
def test_generation_success_hand_cases(text, new, true, ok):
    assert generation_success(text, new, true) is ok


def test_helpers():
    assert answer_line("\n a\nb") == " a" and answer_line("") == ""
    assert mentions("in C++ and Go", " C++") and not mentions("x", "  ") and not mentions("x", None)


def test_metrics_from_greedy_texts():
    req = EditRequest("The mother tongue of {} is", "Danielle Darrieux", "English", "French",
                      ["p1 {}".replace("{}", "Danielle Darrieux"), "p2 Danielle Darrieux"])
    rec = EvalRecord(req)
    meas = {g: {"nll_new": [1.0] * k, "nll_true": [2.0] * k, "acc_new": [1.0] * k}
            for g, k in (("rewrite", 1), ("paraphrase", 2), ("neighborhood", 0))}
    meas["generations"] = []
    meas["greedy"] = {"rewrite": [" English."], "paraphrase": [" French.", " English, of course"]}
    m = metrics_of(meas, rec, None)
    assert m.gen_efficacy == 1.0 and m.gen_generalization == 0.5
    assert m.efficacy == 1.0  # teacher forcing says 1 for both paraphrases, generation only for one
    del meas["greedy"]
    assert metrics_of(meas, rec, None).gen_efficacy is None  # not measured: unavailable, never guessed


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama", "tiny-gemma3"])
def test_batched_greedy_equals_one_prompt_at_a_time(tiny_by_name, name):
    lm = tiny_by_name(name)
    prompts = ["The mother tongue of Danielle Darrieux is", "Paris is", "Where Danielle Darrieux grew up, people"]
    assert greedy(lm, prompts, 6) == [text_greedy(lm, p, 6) for p in prompts]


def test_measure_records_the_greedy_continuations(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    req = EditRequest("The mother tongue of {} is", "Danielle Darrieux", "English", "French",
                      ["Danielle Darrieux speaks"])
    out = measure(lm, EvalRecord(req), n_gen=0, greedy_tokens=5)
    assert len(out["greedy"]["rewrite"]) == 1 and len(out["greedy"]["paraphrase"]) == 1
    assert "greedy" not in measure(lm, EvalRecord(req), n_gen=0, greedy_tokens=0)
