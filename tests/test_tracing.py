"""Causal tracing: the fast engine equals the reference algorithm; identities of restoration; clear errors."""

import numpy as np
import pytest
import torch

from editkit.core.errors import EditkitError
from editkit.figures.tracing import aie_depth
from editkit.model.shipped import SHIPPED
from editkit.tracing import TraceSetup, TraceSpec, fast_trace, parse_noise, reference_trace, trace
from editkit.tracing.aie import CLASSES, average_indirect_effect, load_run, shipped_runs, token_classes
from editkit.tracing.reference import trace_with_patch
from editkit.tracing.severing import sever

PROMPT, SUBJECT = "The Space Needle is in downtown Seattle", "Space Needle"


@pytest.fixture
def setup(tiny):
    return tiny, TraceSetup.build(tiny, TraceSpec(PROMPT, SUBJECT, samples=3, noise=parse_noise("3s")))


@pytest.mark.parametrize("kind", ["hidden", "mlp", "attn"])
def test_fast_engine_equals_reference(setup, kind):
    lm, s = setup
    ref = reference_trace(lm, s, kind, window=2)
    fast = fast_trace(lm, s, kind, window=2)
    assert torch.allclose(fast, ref, atol=1e-5, rtol=0), float((fast - ref).abs().max())
    assert float(ref.max() - ref.min()) > 1e-4  # the comparison is not between two constant maps


def test_last_position_reference_equals_full_reference(tiny_by_name):
    lm = tiny_by_name("tiny-gemma3")
    s = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=2))
    full = reference_trace(lm, s, "mlp", window=2)
    assert torch.allclose(reference_trace(lm, s, "mlp", window=2, last_only=True), full, atol=1e-6, rtol=0)


def test_prefix_cache_is_used_and_left_unchanged(setup):
    """The tokens before the subject run once: every family exposes its cache layers, and a trace leaves the cached
    prefix exactly as it was (each run appends the suffix, then rewinds)."""
    lm, s = setup
    assert s.prefix_len == s.subject_range[0] > 0
    before = [t.clone() for t in s.prefix_kv.keys + s.prefix_kv.values]
    fast_trace(lm, s, "hidden")
    for value, saved in zip(s.prefix_kv.keys + s.prefix_kv.values, before):
        assert torch.equal(value, saved)


@pytest.mark.parametrize("kind", ["hidden", "mlp", "attn"])
def test_subject_at_first_token_has_no_prefix(tiny_by_name, kind):
    lm = tiny_by_name("tiny-gptj")
    prompt = "Space Needle is in downtown"
    s = TraceSetup.build(lm, TraceSpec(prompt, "Space Needle", samples=2))
    if s.subject_range[0] > 0:  # a tokenizer that adds a BOS token: the BOS is the prefix
        assert s.prefix_len == s.subject_range[0]
    ref = reference_trace(lm, s, kind, window=2)
    assert torch.allclose(fast_trace(lm, s, kind, window=2), ref, atol=1e-5, rtol=0)


def test_rows_before_subject_equal_low_score_exactly(setup):
    lm, s = setup
    b = s.subject_range[0]
    assert b > 0
    for kind in ("hidden", "mlp", "attn"):
        assert (fast_trace(lm, s, kind, window=2)[:b] == s.low_score).all()


def test_restoring_everything_reproduces_clean_run(setup):
    lm, s = setup
    n_tokens = s.input_ids.shape[1]
    for layer in (0, lm.adapter.n_layers // 2, lm.adapter.n_layers - 1):
        p = trace_with_patch(lm, s, [(t, "hidden", layer) for t in range(n_tokens)])
        assert abs(p - s.high_score) < 1e-5


def test_same_noise_same_scores_and_seed_matters(tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    a = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=4, seed=7))
    b = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=4, seed=7))
    c = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=4, seed=8))
    assert torch.equal(a.noise, b.noise) and not torch.equal(a.noise, c.noise)
    assert a.low_score == b.low_score


def test_noise_variants(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    absolute = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=2, noise=parse_noise("0.1")))
    assert absolute.scale == 0.1 and abs(float(absolute.noise.std()) - 0.1) < 0.05
    uniform = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=2,
                                             noise=parse_noise("0.5", uniform=True)))
    assert float(uniform.noise.abs().max()) <= 0.5
    replaced = TraceSetup.build(lm, TraceSpec(PROMPT, SUBJECT, samples=2,
                                              noise=parse_noise("3s", replace=True)))
    b, e = replaced.subject_range
    assert torch.allclose(replaced.corrupt["resid_pre.0"][:, b:e] - replaced.clean["resid_pre.0"][:, b:e] * 0,
                          replaced.corrupt["resid_pre.0"][:, b:e])
    for spec in ("abc", "-1", "0", "nan", ""):
        with pytest.raises(EditkitError):
            parse_noise(spec)


def test_target_changes_answer(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    r = trace(lm, TraceSpec(PROMPT, SUBJECT, target=" the", kinds="hidden", samples=2))["hidden"]
    assert r.answer == " the"
    d = r.to_json()
    assert np.allclose(np.array(d["indirect_effect"]), np.array(d["scores"]) - d["low_score"])


@pytest.mark.parametrize("kwargs", [
    {"prompt": "", "subject": "x"},
    {"subject": "Tokyo"},
    {"samples": 0},
    {"window": 0},
    {"kinds": "neurons"},
    {"target": "   "},
    {"noise": "lots"},
])
def test_invalid_inputs_are_clear_errors(tiny_by_name, kwargs):
    lm = tiny_by_name("tiny-gpt2")
    args = {"prompt": PROMPT, "subject": SUBJECT, "samples": 2, **kwargs}
    with pytest.raises(EditkitError):
        trace(lm, TraceSpec(**args))


def test_severing_matches_reference_repatch(setup):
    lm, s = setup
    out = sever(lm, s)
    t = out.token
    L = lm.adapter.n_layers
    for l in (0, L // 2):
        frozen = [(t, "mlp", j) for j in range(l + 1, L)]
        ref = trace_with_patch(lm, s, [(t, "hidden", l)], frozen=frozen)
        assert abs(out.mlp[l] - ref) < 1e-5
        assert abs(out.none[l] - trace_with_patch(lm, s, [(t, "hidden", l)])) < 1e-5


def test_token_classes():
    c = token_classes(8, (2, 5))
    assert c["first subject"] == [2] and c["middle subject"] == [3] and c["last subject"] == [4]
    assert c["first subsequent"] == [5] and c["further tokens"] == [6] and c["last token"] == [7]
    assert set(c) == set(CLASSES)


def test_aie_runs_and_resumes(tiny_by_name, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    lm = tiny_by_name("tiny-gpt2")
    fake = [{"known_id": i, "prompt": f"The Eiffel Tower number {i} is in", "subject": "Eiffel Tower"}
            for i in range(3)]
    monkeypatch.setattr("editkit.tracing.aie.predicted_facts", lambda lm: fake)
    out = average_indirect_effect(lm, n_facts=3, samples=2, window=2)
    assert out.n_facts == 3
    ls = out.kinds["hidden"]["last token"]
    assert len(ls.mean) == lm.adapter.n_layers and all(lo <= m <= hi for lo, m, hi in
                                                       zip(ls.low, ls.mean, ls.high))
    monkeypatch.setattr("editkit.tracing.tracer.TraceSetup.build",
                        lambda *a, **k: pytest.fail("recomputed a cached fact"))
    again = average_indirect_effect(lm, n_facts=3, samples=2, window=2)
    assert again == out



def test_aie_run_file_and_its_figures(tiny_by_name, tmp_path, monkeypatch):
    """What `aie --json` writes reads back as a run; ROME Fig. 2 in three panels and two models of different depths
    on one relative depth axis draw from it; a file that is not a run gets one message."""
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    fake = [{"known_id": i, "prompt": f"The Eiffel Tower number {i} is in", "subject": "Eiffel Tower"}
            for i in range(2)]
    monkeypatch.setattr("editkit.tracing.aie.predicted_facts", lambda lm: fake)
    runs = {}
    for name in ("tiny-gpt2", "tiny-llama"):
        run = average_indirect_effect(tiny_by_name(name), n_facts=2, samples=2, window=2)
        path = tmp_path / f"aie-{name}.json"
        run.save(path)
        runs[name] = load_run(path)
        assert runs[name] == run and runs[name].model == name
    panels = runs["tiny-gpt2"].figure()
    named = [t for t in panels.data if t.showlegend is not False]
    assert len({t.xaxis for t in panels.data}) == 3 and len(named) == len(runs["tiny-gpt2"].kinds["hidden"])
    depth = aie_depth({k: r.to_json() for k, r in runs.items()}, "mlp", "last subject")
    curves = [t for t in depth.data if t.fill is None]
    assert len(curves) == 2 and all(c.x[0] == 0 and c.x[-1] == 1 for c in curves)
    (tmp_path / "bad.json").write_text('{"sequential": {}}')
    with pytest.raises(EditkitError, match="holds no AIE run"):
        load_run(tmp_path / "bad.json")


def test_shipped_aie_runs_are_whole():
    """The README's AIE runs: one per shipped real model, over at least 100 facts, every band around its mean."""
    runs = shipped_runs()
    assert set(runs) == set(SHIPPED)
    for name, run in runs.items():
        assert run.n_facts >= 100 and run.shipped, name
        for kind, classes in run.kinds.items():
            for c, s in classes.items():
                assert len(s.mean) == run.layers and 1 <= s.n <= run.n_facts, (name, kind, c)
                assert all(lo <= m <= hi for lo, m, hi in zip(s.low, s.mean, s.high)), (name, kind, c)


def test_space_needle_pattern_on_embedded_model(gemma):
    """ROME's pattern: early-to-middle peak at the last subject token, the last token takes over late."""
    r = trace(gemma, TraceSpec("The Space Needle is in downtown", "Space Needle", kinds="hidden"))["hidden"]
    scores = np.array(r.scores)
    b, e = r.subject_range
    last_subject, last = e - 1, len(r.tokens) - 1
    assert r.answer == " Seattle" and r.tokens[last_subject] == " Needle"
    early = scores[:, : len(scores[0]) // 2]
    t_peak, l_peak = np.unravel_index(early.argmax(), early.shape)
    assert t_peak == last_subject
    late = scores[:, -3:]
    assert (late.argmax(0) == last).all()
    assert scores[last_subject, :8].max() - r.low_score > 0.2  # a strong effect, not noise


def test_aie_depth_titles_name_each_token_class_once():
    """A shipped-runs chart read "restored attention outputs at the last token token" (issue 60.14)."""
    from editkit.figures.tracing import token_phrase
    from editkit.tracing.aie import CLASSES

    for c in CLASSES:
        said = f"at the {token_phrase(c)}"
        assert "token token" not in said and "tokens token" not in said and said.count("token") == 1, said
    assert token_phrase("last subject") == "last subject token" and token_phrase("last token") == "last token"


def test_the_hidden_state_caption_reads_the_subject_not_the_output():
    """Restoring the last token's hidden state in late layers restores the output itself: the tracing page's
    caption said "Peak: ' of' at layer 16" (issue 60.11). site_peak reads the subject's tokens for hidden
    states and MLP outputs, and everywhere for attention (ROME's late site is the last token)."""
    from editkit.tracing import TraceResult

    scores = [[0.1, 0.1, 0.1], [0.2, 0.6, 0.3], [0.4, 0.5, 0.2], [0.1, 0.3, 0.95]]
    r = TraceResult(tokens=["The", " Space", " Needle", " in"], subject_range=(1, 3), answer=" Seattle",
                    answer_id=1, high_score=0.95, low_score=0.1, kind="hidden", window=1, noise_scale=0.1,
                    noise={}, samples=10, seed=1, scores=scores)
    assert r.peak() == (3, 2, 0.95) and r.site_peak() == (1, 1, 0.6)
    attn = TraceResult(**{**r.__dict__, "kind": "attn"})
    assert attn.site_peak() == (3, 2, 0.95)


def test_a_trace_keeps_the_spread_of_its_corrupted_runs(tiny_by_name, tmp_path, monkeypatch):
    """The band a restoration must clear to differ from no restoration, 1.96 s sqrt(2/n), s the sample spread
    of p(answer) over the corrupted runs; kept through the cache; none with one run."""
    from editkit.tracing import Tracer, TraceSpec, parse_noise
    from editkit.tracing.setup import TraceSetup

    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    lm = tiny_by_name("tiny-gpt2")
    spec = TraceSpec("The Space Needle is in downtown", "Space Needle", None, 6, parse_noise("3s"), 2, 1)
    r = Tracer(lm, spec).result("hidden")
    setup = TraceSetup.build(lm, spec)
    assert r.low_sd == pytest.approx(setup.low_sd) and r.low_sd > 0
    assert r.band == pytest.approx(1.96 * r.low_sd * (2 / 6) ** 0.5)
    again = Tracer(lm, spec).result("hidden")  # from the cache: the spread travels with the result
    assert again.cached and again.low_sd == pytest.approx(r.low_sd)
    one = Tracer(lm, TraceSpec(spec.prompt, spec.subject, None, 1, spec.noise, 2, 1)).result("hidden")
    assert one.low_sd is None and one.band is None
