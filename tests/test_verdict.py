"""Comparisons that conclude (editkit/evaluation/verdict.py): the best option by a named measure, the options within
noise of it, said in one sentence; the noise is the paired (or binomial) 1.96 standard error computed by hand here,
and every comparison view's wording comes from it (methods, layers of a sweep, lifelong runs, two models)."""
import math

import pytest

from editkit.evaluation import verdict
from editkit.evaluation.depth import answer_mismatches, depth_summary
from editkit.lesson import compute, grading
from editkit.lesson.pack import SHIPPED, Pack


def test_paired_noise_is_the_standard_error_of_the_prompt_by_prompt_differences():
    per = {"a": {"rewrite": [0.9], "paraphrase": [0.8, 0.6], "neighborhood": [0.5, 0.4, 0.3]},
           "b": {"rewrite": [0.95], "paraphrase": [0.7, 0.7], "neighborhood": [0.5, 0.2, 0.3]}}
    r = verdict.paired(per, "the summed margin")
    assert r.values["a"] == pytest.approx(0.9 + 0.7 + 0.4) and r.values["b"] == pytest.approx(0.95 + 0.7 + 1 / 3)
    assert r.best == "a"
    d_par, d_nb = [0.7 - 0.8, 0.7 - 0.6], [0.0, 0.2 - 0.4, 0.0]  # b - a, prompt by prompt

    def var(x):
        m = sum(x) / len(x)
        return sum((v - m) ** 2 for v in x) / (len(x) - 1)

    assert r.noise["b"] == pytest.approx(1.96 * math.sqrt(var(d_par) / 2 + var(d_nb) / 3))  # rewrite: one prompt
    assert r.ties == ["b"] and "within noise" in r.sentence() and r.sentence().startswith("By the summed margin")


def test_a_clear_winner_is_said_to_be_ahead_by_more_than_the_noise():
    per = {"a": {"paraphrase": [0.9, 0.91, 0.9]}, "b": {"paraphrase": [0.1, 0.11, 0.12]}}
    r = verdict.paired(per, "P(new)", labels={"a": "ROME", "b": "AlphaEdit"})
    assert r.best == "a" and r.ties == [] and "ahead of AlphaEdit" in r.sentence() and "more than the noise" in \
        r.sentence()


def test_one_band_decides_what_is_within_noise():
    """The Lesson's step 9 (Space Needle) read "layer 15 (2.475) is best, but layer 0 (2.458) ... within noise
    of it (95% band ±0.076); then, each further from it than the noise of its own difference, layer 11
    (2.463)": a layer closer to the best listed as outside the noise. One band decides now: every option
    closer to the best than the band the sentence quotes is within noise, every other one is outside it and
    outside its own band too."""
    r = verdict.Ranking("the summed margin", {"a": 2.475, "b": 2.458, "c": 2.463, "d": 1.9}, "a",
                        {"a": 0.0, "b": 0.076, "c": 0.01, "d": 0.05})
    assert r.band == pytest.approx(0.076) and r.ties == ["c", "b"]
    assert r.sentence() == ("By the summed margin, a (2.475) is best, but c (2.463) and b (2.458) are within "
                            "noise of it (less than the 95% band, ±0.076, away); then d (1.900).")
    r = verdict.Ranking("the summed margin", {"a": 2.475, "b": 2.458, "d": 1.9}, "a",
                        {"a": 0.0, "b": 0.076, "d": 0.05})
    assert r.sentence().endswith("; then d (1.900).")


@pytest.mark.parametrize("seed", range(20))
def test_the_band_splits_every_ranking_in_two(seed):
    """Whatever the noises: an option is within noise exactly when it is closer to the best than the quoted
    band, and every option outside the band is outside its own noise too (the sentence never contradicts a
    reader who applies either rule)."""
    import random

    rng = random.Random(seed)
    values = {i: rng.uniform(0, 3) for i in range(8)}
    best = max(values, key=values.get)
    noise = {i: (None if rng.random() < 0.2 else rng.uniform(0, 1)) for i in values}
    r = verdict.Ranking("m", values, best, noise)
    for o in values:
        if o == best:
            continue
        assert (o in r.ties) == (r.band is not None and r.gap(o) <= r.band)
        if o not in r.ties and noise[o] is not None:
            assert r.gap(o) > noise[o]


def test_a_curve_has_a_peak_only_outside_the_band_of_its_largest_value():
    flat = [0.05, 0.08, 0.10, 0.07, 0.09]
    assert verdict.peak(flat, band=0.06) is None  # every layer within noise of the largest: no peak to name
    p = verdict.peak(flat, band=0.025)
    assert p.index == 2 and p.extent == (1, 2, 4) and p.band == 0.025
    p = verdict.peak([0.1, 0.2, 0.9, 0.85, 0.1], band=0.1)
    assert p.index == 2 and p.extent == (2, 3)
    assert verdict.peak(flat, band=None).extent == (2,)  # no noise estimate: named as measured
    a, b = verdict.Peak(2, 0.9, (2, 3), 0.1), verdict.Peak(10, 0.5, (9, 10), 0.1)
    assert a.overlaps(b, 1 / 4, 1 / 12) and not a.overlaps(b, 1 / 4, 1 / 30)
    assert verdict.within_noise(0.5, 0.55, 0.1) and not verdict.within_noise(0.5, 0.55, None)


def test_one_prompt_per_group_says_it_cannot_estimate_the_noise():
    r = verdict.paired({"a": {"rewrite": [0.9]}, "b": {"rewrite": [0.5]}}, "P(new)")
    assert not r.estimated and r.ties == [] and "no spread" in r.sentence()


def test_rates_use_the_binomial_noise():
    r = verdict.rates({"m": 0.904, "a": 0.816}, {"m": 500, "a": 500}, "efficacy", scale=100, unit="%")
    assert r.noise["a"] == pytest.approx(1.96 * math.sqrt(0.904 * 0.096 / 500 + 0.816 * 0.184 / 500))
    assert r.best == "m" and r.ties == []


def _sweep(rows, peak):
    return {"rows": rows, "peak_layer": peak, "best_layer": max(rows, key=lambda r: sum(
        sum(v) / len(v) for v in r["margins"].values()))["layer"], "trace": {"token": " Tower"}}


def _row(layer, gen, nb):
    return {"layer": layer, "margins": {"rewrite": [0.99], "paraphrase": gen, "neighborhood": nb}}


def test_step_9_grades_a_near_tie_as_within_noise():
    """The shipped Eiffel Tower sweep's layers 2 and 4 (summed margins 2.344 against 2.318), with their per-prompt
    margins as `lesson build` stores them now: the difference is within noise, and the step says so."""
    rows = [_row(2, [0.857874, 0.893623], [0.490669, 0.50993, 0.438089]),
            _row(4, [0.96548, 0.818847], [0.554341, 0.560422, 0.179446]),
            _row(9, [0.1, 0.2], [0.3, 0.2, 0.1])]
    rows[0]["margins"]["rewrite"], rows[1]["margins"]["rewrite"] = [0.98892], [0.994401]
    sweep = _sweep(rows, peak=4)
    assert sweep["best_layer"] == 2 and compute.sweep_ranking(sweep).ties == [4]
    assert grading.sweep_truth(sweep) == 2
    right, yes, no = (grading.grade_sweep(sweep, c) for c in (2, 0, 1))
    assert right.verdict == "right" and yes.verdict == no.verdict == "close"
    assert "within noise" in right.feedback


def test_step_9_grades_a_clear_answer_yes_or_no():
    clear = [_row(2, [0.9, 0.91], [0.5, 0.5, 0.52]), _row(9, [0.1, 0.12], [0.1, 0.12, 0.1])]
    assert grading.sweep_truth(_sweep(clear, peak=2)) == 0 and grading.sweep_truth(_sweep(clear, peak=9)) == 1


def test_the_shipped_packs_comparisons_conclude():
    """Every comparison step of the shipped pack states what differs and which is best, in one sentence each."""
    pack = Pack.open(SHIPPED)
    fid = pack.fact_ids[0]
    edits = {m: pack.part(fid, f"edit-0-{m}") for m in pack.manifest["method_names"]}
    methods = grading.methods_conclusion(edits)
    assert methods.startswith("By the summed margin") and "is best" in methods
    assert "within noise" in methods  # ROME 2.318, MEMIT 2.197, PMET 1.965 on five prompts
    sweep = grading.sweep_conclusion(pack.part(fid, "sweep"))
    assert "layer" in sweep and "peaks at layer 4" in sweep
    assert "layer 2 (2.344) is best" in sweep and "layer 4 (2.318)" in sweep and "within noise" in sweep
    assert grading.sweep_truth(pack.part(fid, "sweep")) == 2  # the near tie is graded "too close to tell"
    note = grading.early_site_note(pack.part(fid, "trace")["traces"]["hidden"])
    assert "differs from ROME's pattern" in note and "' Eiffel'" in note  # the pack's peak is the first token


def test_two_models_summary_and_the_warning_for_another_answer():
    pack = Pack.open(SHIPPED)
    a, b = (pack.part(f, "trace")["traces"]["hidden"] for f in pack.fact_ids[:2])
    text = depth_summary({"gemma-3-270m": a, "smollm2-135m": b})
    # the pack's Eiffel Tower: restoring the hidden state at ' Tower' brings back at most 0.03 of p(answer), at
    # ' Eiffel' 0.61 (early_site_note above): the last subject token's curve is not where Gemma recalls it
    assert "gemma-3-270m restores little at ' Tower' (at most 0.03), less than at ' Eiffel', layer 3" in text
    assert "No depths compared: gemma-3-270m" in text and "restores more" not in text
    warn = answer_mismatches({"gemma-3-270m": a, "smollm2-135m": b},
                             {"gemma-3-270m": (a["answer"], 0.7), "smollm2-135m": (" Los", 0.16)})
    assert list(warn) == ["smollm2-135m"] and warn["smollm2-135m"].startswith("smollm2-135m itself predicts ' Los'")
    text = depth_summary({"gemma-3-270m": a, "smollm2-135m": b}, list(warn))  # no comparison of different facts
    assert "Not compared: smollm2-135m" in text and "restores more" not in text and "earlier" not in text


def test_every_value_of_a_sentence_has_the_same_decimals():
    """The Lesson's step 9 read "layer 2 (2.344) ... layer 17 (-0.7848)": four significant digits each, so a
    value under 1 had a decimal more than the others. The decimals now come from the largest value."""
    r = verdict.Ranking("the summed margin", {"a": 2.344, "b": 2.211, "c": -0.78481, "d": 0.05}, "a",
                        {"a": 0.0, "b": 0.5, "c": 0.1, "d": 0.1})
    s = r.sentence()
    assert "a (2.344)" in s and "b (2.211)" in s and "c (-0.785)" in s and "d (0.050)" in s
    pct = verdict.Ranking("efficacy", {"x": 0.88, "y": 0.46}, "x", {"x": 0.0, "y": 0.1}, digits=3, unit="%",
                          scale=100)
    assert "x (88.0%)" in pct.sentence() and "y (46.0%)" in pct.sentence()
