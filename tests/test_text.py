"""Subject ranges, predictions and generation on tiny models."""
import pytest

from editkit.core.errors import EditkitError
from editkit.model.loading import tiny_tokenizer
from editkit.model.text import greedy, top_k
from editkit.model.tokens import find_subject_range, guess_subject, token_strings

TOK = tiny_tokenizer()


def _text(prompt, rng):
    ids = TOK(prompt)["input_ids"][rng[0]:rng[1]]
    return TOK.decode(ids)


@pytest.mark.parametrize("prompt,subject,expected", [
    ("The Space Needle is in downtown", "Space Needle", " Space Needle"),
    ("The Space Needle is in downtown", " Space Needle ", " Space Needle"),  # user's stray spaces
    ("Paris is the capital of France", "Paris", "Paris"),  # subject at position 0
    ("Zürich is a city in", "Zürich", "Zürich"),  # unicode (multi-byte) subject
    ("I love the café Müller in Berlin", "Müller", " Müller"),
])
def test_subject_range(prompt, subject, expected):
    rng = find_subject_range(TOK, prompt, subject)
    assert rng[0] < rng[1]
    assert _text(prompt, rng) == expected


def test_repeated_subject_first_unless_told():
    prompt = "Apple makes phones, and Apple is based in"
    first = find_subject_range(TOK, prompt, "Apple")
    second = find_subject_range(TOK, prompt, "Apple", occurrence=1)
    assert first[1] <= second[0]
    assert _text(prompt, second).strip() == "Apple"
    with pytest.raises(EditkitError, match="occurs 2 time"):
        find_subject_range(TOK, prompt, "Apple", occurrence=2)


@pytest.mark.parametrize("subject", ["Tokyo", "", "   "])
def test_subject_not_in_prompt(subject):
    with pytest.raises(EditkitError):
        find_subject_range(TOK, "The Space Needle is in downtown", subject)


def test_guess_subject():
    assert guess_subject("The Space Needle is in downtown") == "Space Needle"
    assert guess_subject("Danielle Darrieux's mother tongue is") == "Danielle Darrieux"


def test_top_k_and_generate(tiny):
    preds = top_k(tiny, "The Eiffel Tower is in", 5)
    assert len(preds) == 5
    assert preds[0].prob >= preds[-1].prob
    assert abs(sum(p.prob for p in top_k(tiny, "Hello", 2000)) - 1) < 1e-3
    out = greedy(tiny, "The Eiffel Tower is in", 5)
    assert isinstance(out, str)
    assert len(token_strings(tiny, "a b")) >= 2


@pytest.mark.parametrize("prompt", ["", "   ", "word " * 600])
def test_bad_prompts(tiny_by_name, prompt):
    with pytest.raises(EditkitError):
        top_k(tiny_by_name("tiny-gpt2"), prompt)
