"""The shared result cache: a hit needs identical inputs and weights (an applied edit or changed parameters miss),
--no-cache recomputes, and the CLI, the AIE and the severing chart use the same entries."""
import json

import pytest
import torch

from editkit.cli import main
from editkit.model.weights import applied
from editkit.tracing import Tracer, TraceSpec, trace
from editkit.tracing.aie import average_indirect_effect

PROMPT, SUBJECT = "The Space Needle is in downtown Seattle", "Space Needle"


@pytest.fixture
def lm(tiny_by_name, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    return tiny_by_name("tiny-gpt2")


def _no_recompute(monkeypatch):
    monkeypatch.setattr("editkit.tracing.tracer.TraceSetup.build",
                        lambda *a, **k: pytest.fail("recomputed a cached trace"))


def test_identical_inputs_and_weights_hit(lm, monkeypatch):
    first = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2, window=2)).result("mlp")
    assert not first.meta.get("cached")
    _no_recompute(monkeypatch)
    again = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2, window=2)).result("mlp")
    assert again.meta["cached"] and again.scores == first.scores and again.tokens == first.tokens
    assert again.low_score == first.low_score and again.answer == first.answer


@pytest.mark.parametrize("change", [
    {"prompt": "The Space Needle is in downtown"}, {"subject": "Needle"}, {"target": " the"}, {"samples": 3},
    {"noise": "2s"}, {"seed": 2}, {"window": 3},
])
def test_any_other_input_misses(lm, change):
    base = {"prompt": PROMPT, "subject": SUBJECT, "target": None, "samples": 2, "noise": "3s", "seed": 1,
            "window": 2}
    Tracer(lm, TraceSpec(**base)).result("mlp")
    assert Tracer(lm, TraceSpec(**{**base, **change})).cached("mlp") is None


def test_hidden_panel_does_not_depend_on_the_window(lm, monkeypatch):
    Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2, window=2)).result("hidden")
    assert Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2, window=5)).cached("hidden") is not None


def test_an_applied_edit_misses_and_gets_its_own_entry(lm):
    base = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2)).result("hidden")
    name = lm.adapter.param_name("down_proj", 1)
    weight = dict(lm.model.named_parameters())[name]
    delta = {name: torch.randn_like(weight) * 0.5}
    with applied(lm.model, delta):
        tracer = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2))
        assert tracer.cached("hidden") is None
        edited = tracer.result("hidden")
        assert Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2)).cached("hidden").scores == edited.scores
    assert edited.scores != base.scores
    assert Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2)).cached("hidden").scores == base.scores  # base intact


def test_changed_parameters_miss(lm):
    Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2)).result("attn")
    weight = lm.adapter.down_proj(0).weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.add_(0.01)
        assert Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2)).cached("attn") is None
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    assert Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2)).cached("attn") is not None


def test_no_cache_recomputes_and_stores_nothing(lm):
    Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2), cache=False).result("hidden")
    assert Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2)).cached("hidden") is None
    Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2)).result("hidden")
    fresh = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2), cache=False).result("hidden")
    assert not fresh.meta.get("cached")


def test_cli_uses_the_cache_and_no_cache_recomputes(lm, capsys):
    args = ["trace", "--model", "tiny-gpt2", "--prompt", PROMPT, "--subject", SUBJECT, "--samples", "2",
            "--kind", "hidden", "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert not first["cached"] and second["cached"] and second["scores"] == first["scores"]
    assert main(args + ["--no-cache"]) == 0
    assert not json.loads(capsys.readouterr().out)["cached"]


def test_trace_function_severing_and_aie_share_entries(lm, monkeypatch):
    fake = [{"known_id": 0, "prompt": PROMPT, "subject": SUBJECT}]
    monkeypatch.setattr("editkit.tracing.aie.predicted_facts", lambda lm: fake)
    average_indirect_effect(lm, n_facts=1, samples=2, window=2)
    tracer = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2, window=2))
    assert all(tracer.cached(k) is not None for k in ("hidden", "mlp", "attn"))
    severed = tracer.severing()  # reuses the cached hidden row for "none"
    assert severed.none == tracer.cached("hidden").scores[severed.token]
    _no_recompute(monkeypatch)
    again = trace(lm, TraceSpec(PROMPT, SUBJECT, samples=2, window=2))
    assert again["attn"].scores == tracer.cached("attn").scores
    assert Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2, window=2)).severing() == severed


def test_one_schedule_equals_panel_by_panel(lm):
    together = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2, window=2), cache=False).results(together=True)
    apart = Tracer(lm, TraceSpec(PROMPT, SUBJECT, samples=2, window=2), cache=False).results()
    for kind in apart:
        assert torch.allclose(torch.tensor(together[kind].scores), torch.tensor(apart[kind].scores), atol=1e-6)
