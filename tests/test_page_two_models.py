"""The causal tracing page traces the same fact on two loaded models at once, on a relative depth axis; the
figure's depth axis and restored share are checked against the traces themselves."""
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from editkit.evaluation.depth import depth_summary, peaks
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


def _curve(shares, sd, samples=10, high=0.6, low=0.1):
    """A one-kind trace whose last subject token restores `shares` of p_clean - p* per layer; the first
    subject token restores 0.5 at layer 2 (where a flat curve's model has its effect)."""
    gap = high - low
    first = [low + gap * (0.5 if l == 2 else 0.0) for l in range(len(shares))]
    return {"kind": "mlp", "scores": [first, [low + gap * v for v in shares]], "high_score": high,
            "low_score": low, "low_sd": sd, "samples": samples, "subject_range": [0, 2],
            "tokens": [" Sagrada", " Familia"], "answer": " Barcelona"}


def test_a_flat_curve_has_no_peak_and_nothing_is_compared_to_it():
    """Issue 60.4: SmolLM2's curve at the last subject token was <= 0.10 everywhere, yet the page said it
    "peaks at relative depth 0.00 (layer 0 of 30, share 0.10) ... recalls it earlier in its depth, by 0.29".
    The band: 1.96 sd sqrt(2/n) / (p_clean - p*) = 1.96 * 0.15 * sqrt(0.2) / 0.5 = 0.26 in share units
    here."""
    clear = _curve([0.05, 0.2, 0.7, 0.9, 0.6, 0.2, 0.1], sd=0.05)
    flat = _curve([0.10, 0.08, 0.06, 0.09, 0.05, 0.07, 0.04, 0.03, 0.06, 0.02], sd=0.15)
    text = depth_summary({"gemma": clear, "smollm2": flat})
    assert "gemma peaks at relative depth 0.50 (layer 3 of 7, share 0.90, ±0.09)" in text
    assert "smollm2 has no peak worth naming at ' Familia'" in text and "(95% band ±0.26)" in text
    assert "its largest restoration is at ' Sagrada', layer 2 (share 0.50)" in text
    assert "earlier" not in text and "restores more" not in text and "No depths compared: smollm2" in text
    named = peaks({"gemma": clear, "smollm2": flat})
    assert named["gemma"].index == 3 and named["smollm2"] is None
    fig = depth_comparison({"gemma": clear, "smollm2": flat}, named)
    assert [t.text[0] for t in fig.data if t.mode == "markers+text"] == ["layer 3"]  # no mark on the flat one
    assert any("(no peak worth naming)" in (t.name or "") for t in fig.data)


def test_a_peak_below_another_subject_tokens_restoration_is_not_the_recall():
    """Issue 60's second walk: on "The Golden Gate Bridge is located in the city of" both models restored at most
    0.02 and 0.04 at ' Bridge' (peaks outside their 0.01 bands) and 0.3-0.45 at ' Gate'; the page compared the
    two small peaks' depths and shares as if they were where each model recalls the fact."""
    small = _curve([0.0, 0.0, 0.04, 0.01, 0.0, 0.0, 0.0], sd=0.005)  # band 0.009: a peak, far below 0.5
    clear = _curve([0.05, 0.2, 0.7, 0.9, 0.6, 0.2, 0.1], sd=0.05)
    text = depth_summary({"gemma": clear, "smollm2": small})
    assert "smollm2 restores little at ' Familia' (at most 0.04), less than at ' Sagrada', layer 2 (share " \
           "0.50) by more than the noise (95% band ±0.01)" in text
    assert "earlier" not in text and "restores more" not in text and "No depths compared: smollm2" in text
    assert peaks({"gemma": clear, "smollm2": small})["smollm2"] is None
    near = _curve([0.0, 0.0, 0.48, 0.01, 0.0, 0.0, 0.0], sd=0.005)  # 0.48 against 0.50, the band 0.009
    assert peaks({"near": near})["near"] is None  # 0.02 apart, more than the band: the other token recalls it
    close = _curve([0.0, 0.0, 0.495, 0.01, 0.0, 0.0, 0.0], sd=0.005)
    assert peaks({"close": close})["close"].index == 2  # within the noise of the other token's: named


def test_two_peaks_are_compared_by_the_same_rule():
    a = _curve([0.0, 0.1, 0.9, 0.3, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], sd=0.02)  # layer 2 of 11: 0.2
    b = _curve([0.0, 0.1, 0.2, 0.3, 0.5, 0.88, 0.9, 0.4, 0.1], sd=0.02)  # layers 5-6 of 9: 0.62-0.75
    text = depth_summary({"a": a, "b": b})
    assert "b peaks at relative depth 0.75 (layer 6 of 9, share 0.90; layers 5-6 within noise of it)" in text
    assert "a recalls it earlier in its depth, by 0.4" in text and "between the peaks' extents" in text
    assert "restore as much within noise" in text  # 0.90 against 0.90
    c = _curve([0.0, 0.1, 0.3, 0.6, 0.5, 0.3, 0.1, 0.1, 0.1, 0.1, 0.1], sd=0.02)  # layer 3 of 11: 0.3
    same = depth_summary({"a": a, "c": c})
    assert "Both at the same relative depth" in same and "a restores more (0.90 against 0.60" in same
    no_sd = depth_summary({"a": {**a, "low_sd": None}, "b": b})
    assert "no noise estimate" in no_sd


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
    assert any("peaks at relative depth" in m.value or "no peak worth naming" in m.value for m in at.markdown)
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
