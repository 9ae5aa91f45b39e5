"""Property-based tests: any string or record thrown at the text utilities, tracing and request parsing gives a
result or an EditkitError (a clear message for the user), never another exception."""
import functools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from editkit.core.errors import EditkitError
from editkit.editing.requests import EditRequest, parse_requests
from editkit.model.loading import load_model
from editkit.model.tokens import check_prompt, encode, find_subject_range, guess_subject, token_strings
from editkit.tracing import TraceSpec, trace

SETTINGS = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# unicode of every kind, plus the shapes that break parsers: empty, whitespace, braces, very long
texts = st.one_of(
    st.text(max_size=60),
    st.just(""),
    st.text(alphabet=" \t\n\r\u00a0\u2003", max_size=10),
    st.text(alphabet="{}[]\"':,\\ ", max_size=30),
    st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=5), st.integers(200, 2000)),
    st.sampled_from(["The Space Needle is in downtown", "{} is in", "<bos>", "日本の首都は東京", "🙂🙂", "\x00"]),
)


@functools.lru_cache(maxsize=None)
def _lm(name="tiny-gpt2"):
    return load_model(name, device="cpu")


def _ok_or_user_error(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except EditkitError as exc:
        assert str(exc), "an EditkitError must say what is wrong"
        return None


@SETTINGS
@given(prompt=texts)
def test_text_utilities(prompt):
    lm = _lm()
    _ok_or_user_error(check_prompt, lm, prompt)
    toks = token_strings(lm, prompt)
    assert isinstance(toks, list) and all(isinstance(t, str) for t in toks)
    if prompt:
        batch = encode(lm, [prompt, "x"])
        assert batch["input_ids"].shape[0] == 2
    subject = guess_subject(prompt)
    assert isinstance(subject, str)


@SETTINGS
@given(prompt=texts, subject=texts, occurrence=st.integers(-2, 3))
def test_find_subject_range(prompt, subject, occurrence):
    lm = _lm()
    r = _ok_or_user_error(find_subject_range, lm.tok, prompt, subject, occurrence)
    if r is not None:
        start, end = r
        assert 0 <= start < end <= len(lm.tok(prompt, add_special_tokens=True)["input_ids"])


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(prompt=texts, subject=texts, target=st.one_of(st.none(), texts))
def test_trace_gives_result_or_user_error(prompt, subject, target):
    lm = _lm()
    res = _ok_or_user_error(lambda: trace(lm, TraceSpec(prompt, subject, target, kinds=("hidden",), samples=2,
                                                        window=2)))
    if res is not None:
        assert set(res) == {"hidden"}


@settings(max_examples=8, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_trace_on_valid_prompt_with_random_subject_part(data):
    """Subjects cut out of a real prompt (always present) trace fine on every kind of state."""
    lm = _lm()
    prompt = data.draw(st.sampled_from(["The Space Needle is in downtown", "Paris is the capital of",
                                        "日本の首都は東京", "a {b} c d e"]))
    i = data.draw(st.integers(0, len(prompt) - 1))
    j = data.draw(st.integers(i + 1, len(prompt)))
    res = _ok_or_user_error(lambda: trace(lm, TraceSpec(prompt, prompt[i:j], None, kinds="all", samples=2,
                                                        window=2)))
    if prompt[i:j].strip():
        assert res is not None, f"a subject inside the prompt must trace: {prompt[i:j]!r}"


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), texts),
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.text(max_size=8), children, max_size=3)),
    max_leaves=8,
)
FIELDS = ["prompt", "subject", "target_new", "target_true", "paraphrase_prompts", "neighborhood_prompts",
          "generation_prompts", "requested_rewrite", "src", "alt", "rephrase", "loc", "locality_inputs", "case_id",
          "prompts", "ground_truth"]
records = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)
valid_like = st.fixed_dictionaries({"prompt": texts, "subject": texts, "target_new": st.one_of(texts, json_values)},
                                   optional={"target_true": json_values, "paraphrase_prompts": json_values,
                                             "neighborhood_prompts": json_values})


@SETTINGS
@given(obj=st.one_of(records, valid_like, st.lists(st.one_of(records, valid_like), max_size=3), json_values))
def test_parse_requests_objects(obj):
    out = _ok_or_user_error(parse_requests, obj)
    if out is not None:
        assert out and all(isinstance(r, EditRequest) for r in out)
        for r in out:
            assert r.prompt.count("{}") == 1 and r.subject and r.target_new.startswith(" ")
            r.to_dict()


@SETTINGS
@given(text=st.one_of(texts, st.builds(lambda t: "{" + t, texts), st.builds(lambda t: "[" + t, texts)))
def test_parse_requests_strings(text):
    """A string is a JSON text or a path; either way: requests or a clear error."""
    out = _ok_or_user_error(parse_requests, text)
    if out is not None:
        assert all(isinstance(r, EditRequest) for r in out)
