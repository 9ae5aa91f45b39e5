"""The causal tracing page traces the same fact on two loaded models at once, on a relative depth axis; the
figure's depth axis and restored share are checked against the traces themselves."""
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from editkit.figures.tracing import depth_comparison, relative_depth, restored_share

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def test_relative_depth_and_restored_share():
    assert relative_depth(5) == [0.0, 0.25, 0.5, 0.75, 1.0] and relative_depth(1) == [0.0]
    r = {"scores": [[0.1, 0.5, 0.9]], "high_score": 0.9, "low_score": 0.1}
    assert restored_share(r, 0) == pytest.approx([0.0, 0.5, 1.0])
    assert restored_share({**r, "high_score": 0.1}, 0) == [0.0, 0.0, 0.0]  # nothing to restore


def _trace(n_layers, kind="mlp"):
    return {"kind": kind, "scores": [[0.1] * n_layers, [0.1 + 0.8 * (l == 1) for l in range(n_layers)]],
            "high_score": 0.9, "low_score": 0.1, "subject_range": [0, 2], "tokens": ["a", "b"], "answer": " x"}


def test_depth_comparison_puts_each_model_on_its_own_depth():
    fig = depth_comparison({"four": _trace(4), "seven": _trace(7)})
    lines = [t for t in fig.data if t.mode != "markers+text"]
    assert [len(t.x) for t in lines] == [4, 7] and lines[0].x[-1] == lines[1].x[-1] == 1.0
    peaks = [t for t in fig.data if t.mode == "markers+text"]
    assert [p.x[0] for p in peaks] == [pytest.approx(1 / 3), pytest.approx(1 / 6)]  # layer 1 of 4 and of 7
    assert [p.text[0] for p in peaks] == ["layer 1", "layer 1"]


def test_tracing_page_traces_one_fact_on_two_models(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=300)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.switch_page("pages/causal_tracing.py").run()
    assert not at.exception
    at.number_input(key="trace_samples").set_value(2)
    assert at.button(key="two_go").disabled  # no second model yet
    at.selectbox(key="two_model").set_value("tiny-llama").run()
    at.selectbox(key="two_kind").set_value("hidden").run()
    at.button(key="two_go").click().run()
    assert not at.exception and not at.error
    out = at.session_state["two_out"]
    assert list(out) == ["tiny-gpt2", "tiny-llama"] and all(r.kind == "hidden" for r in out.values())
    assert out["tiny-gpt2"].answer == out["tiny-llama"].answer  # both follow the first model's answer
    tops = at.session_state["two_tops"]
    differs = tops["tiny-llama"][0].strip() != out["tiny-gpt2"].answer.strip()
    assert differs == any("itself predicts" in w.value for w in at.warning)  # said when the answers differ
    assert any("peaks at relative depth" in m.value for m in at.markdown)
    assert all(r.prompt == "The Space Needle is in downtown" for r in out.values())
    specs = {c.proto.spec for c in at.get("plotly_chart")}
    assert len(specs) == 3  # the comparison and one heatmap per model
    comparison = next(json.loads(s) for s in specs if "by relative depth" in s)
    assert {t["name"].split(":")[0] for t in comparison["data"] if t.get("name")} == set(out)
    assert all(json.loads(s)["layout"]["xaxis"]["title"]["text"].startswith("relative depth") for s in specs)


def test_the_second_model_list_offers_random_test_models_only_beside_one():
    from pages.two_models import second_models

    assert second_models("gemma-3-270m") == ["smollm2-135m"]
    assert "tiny-llama" in second_models("tiny-gpt2") and "tiny-gpt2" not in second_models("tiny-gpt2")
