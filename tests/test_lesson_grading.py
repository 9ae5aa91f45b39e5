"""The lesson's questions are graded by the results themselves: right, close and wrong answers for every step."""
import pytest

from editkit.lesson import compute, grading
from editkit.lesson.grading import CLOSE, RIGHT, WRONG


def trace(scores, subject=(1, 3), answer=" Paris", low=0.05, high=0.8):
    tokens = [f"t{i}" for i in range(len(scores))]
    return {"tokens": tokens, "subject_range": list(subject), "scores": scores, "answer": answer, "answer_id": 7,
            "low_score": low, "high_score": high, "kind": "hidden"}


def grid(peak, late=0.8, shape=(5, 6)):
    """Scores 0.1 everywhere, `peak` (token, layer) 0.6, the last token's late layers `late`."""
    t, l = peak
    scores = [[0.1] * shape[1] for _ in range(shape[0])]
    scores[t][l] = 0.6
    scores[-1][-1] = late
    return scores


def test_lens_first_layer():
    lens = {"answer": " Paris", "first_layer": 9, "layers": [[]] * 18}
    assert grading.grade_lens(lens, 9).verdict == RIGHT
    assert grading.grade_lens(lens, 11).verdict == CLOSE
    g = grading.grade_lens(lens, 2)
    assert g.verdict == WRONG and "layer 9" in g.feedback and g.truth == "layer 9"


def test_cells_are_graded_by_distance_to_the_early_site():
    tr = trace(grid((2, 3)))
    assert grading.sites(tr)["early"] == (2, 3) and grading.sites(tr)["late"] == (4, 5)
    assert grading.grade_cell(tr, 2, 3).verdict == RIGHT
    assert grading.grade_cell(tr, 2, 5).verdict == RIGHT  # same token, two layers off
    assert grading.grade_cell(tr, 1, 4).verdict == CLOSE  # a token and a layer off: 1.5
    assert grading.grade_cell(tr, 0, 0).verdict == WRONG
    late = grading.grade_cell(tr, 4, 5)
    assert late.verdict == CLOSE and "late site" in late.feedback
    assert "'t2' (token 2), layer 3" in late.truth


def sev(none, mlp, attn, low=0.05):
    return {"layers": list(range(len(none))), "none": none, "mlp": mlp, "attn": attn, "low_score": low,
            "high_score": 0.8, "token_str": " Needle"}


def test_severing_truth_follows_the_curves():
    mlps = sev([0.5] * 6, [0.1] * 6, [0.45] * 6)
    assert grading.severing_truth(mlps) == 0
    assert grading.grade_severing(mlps, 0).verdict == RIGHT and grading.grade_severing(mlps, 1).verdict == WRONG
    assert "89%" in grading.grade_severing(mlps, 0).feedback  # (0.5 - 0.1) / (0.5 - 0.05)
    assert grading.severing_truth(sev([0.5] * 6, [0.45] * 6, [0.1] * 6)) == 1
    assert grading.severing_truth(sev([0.5] * 6, [0.48] * 6, [0.47] * 6)) == 2


def test_a_near_tie_of_the_severing_curves_is_close():
    """The Space Needle: freezing the MLPs removed 71% of the effect, attention 63%; "the later attention" was
    graded wrong while the feedback said how close they were (issue 60). The other side of a near tie is close, a
    clear loser still wrong, and the sentence says it is a near tie."""
    tie = sev([0.5] * 6, [0.5 - 0.71 * 0.45] * 6, [0.5 - 0.63 * 0.45] * 6)
    assert grading.severing_truth(tie) == 0
    g = grading.grade_severing(tie, 1)
    assert g.verdict == CLOSE and 0 < g.score < 1 and "near tie" in g.feedback and "71%" in g.feedback
    assert grading.grade_severing(tie, 0).verdict == RIGHT
    assert grading.grade_severing(tie, 2).verdict == WRONG  # both remove far more than the 20% line
    clear = sev([0.5] * 6, [0.5 - 0.71 * 0.45] * 6, [0.5 - 0.45 * 0.45] * 6)
    assert grading.grade_severing(clear, 1).verdict == WRONG and "near tie" not in grading.severing_conclusion(clear)
    edge = sev([0.5] * 6, [0.5 - 0.22 * 0.45] * 6, [0.5 - 0.05 * 0.45] * 6)  # the MLPs just over the 20% line
    assert grading.severing_truth(edge) == 0 and grading.grade_severing(edge, 2).verdict == CLOSE
    assert grading.grade_severing(edge, 1).verdict == WRONG


def test_memories_answer_in_values():
    view = {"answer": " Paris", "answer_id": 7, "n_active": 1000, "d_ff": 2048,
            "memories": [{"label": "L4.M1", "value_tokens": [{"token_id": 3}, {"token_id": 7}]},
                         {"label": "L4.M2", "value_tokens": [{"token_id": 5}, {"token_id": 6}]}]}
    assert grading.memory_hits(view) == ["L4.M1"]
    assert grading.grade_memories(view, True).verdict == RIGHT
    assert grading.grade_memories(view, False).verdict == WRONG
    view["memories"] = view["memories"][1:]
    assert grading.grade_memories(view, False).verdict == RIGHT


def edit(p_new, gen=1.0, tf=1.0, label="ROME"):
    return {"target_new": " Rome", "target_true": " Paris", "rewrite": "The Eiffel Tower is in", "label": label,
            "probabilities": {"pre": {"rewrite": [{"p_new": 0.01, "p_true": 0.7}]},
                              "post": {"rewrite": [{"p_new": p_new, "p_true": 0.01}]}},
            "metrics": {"post_gen_efficacy": gen, "post_efficacy": tf}}


def test_edit_probability_bins():
    assert grading.grade_edit(edit(0.95), 3).verdict == RIGHT
    assert grading.grade_edit(edit(0.95), 2).verdict == CLOSE
    assert grading.grade_edit(edit(0.95), 0).verdict == WRONG
    assert grading.bin_of(0.1) == 1 and grading.bin_of(0.0) == 0 and grading.bin_of(1.0) == 3


def test_neighbours_and_generation():
    rows = [{"source": "rewrite", "prompt": "r", "delta_p_new": 0.9, "p_new_before": 0, "p_new_after": 0.9},
            {"source": "neighborhood", "prompt": "a", "delta_p_new": 0.2, "p_new_before": 0, "p_new_after": 0.2},
            {"source": "neighborhood", "prompt": "b", "delta_p_new": 0.001, "p_new_before": 0,
             "p_new_after": 0.001},
            {"source": "known fact", "prompt": "c", "delta_p_new": 0.0, "p_new_before": 0, "p_new_after": 0}]
    bleed = {"rows": rows, "request": {"target_new": " Rome"}}
    assert [r["prompt"] for r in grading.neighbours(bleed)] == ["a", "b", "c"]
    assert grading.grade_neighbours(bleed, ["a"]).verdict == RIGHT
    assert grading.grade_neighbours(bleed, []).verdict == CLOSE  # 2 of 3
    assert grading.grade_neighbours(bleed, ["b", "c"]).verdict == WRONG
    edits = {"rome": edit(0.9, gen=1.0), "memit": edit(0.9, gen=0.0, label="MEMIT")}
    assert grading.grade_generation(edits, ["rome"]).verdict == RIGHT
    g = grading.grade_generation(edits, ["rome", "memit"])
    assert g.verdict == CLOSE and g.truth == "ROME"


def test_sweep_and_lifelong():
    sweep = {"peak_layer": 4, "best_layer": 5, "trace": {"token": " Needle"}}
    assert grading.sweep_truth(sweep) == 0 and grading.grade_sweep(sweep, 0).verdict == RIGHT  # 0: yes
    assert grading.grade_sweep({**sweep, "best_layer": 12}, 0).verdict == WRONG
    shipped = compute.lifelong()["results"]  # the manual's 500-edit run (docs/results/lifelong.md)
    assert grading.first_collapse(shipped) == "ROME"
    g = grading.grade_lifelong(shipped, "ROME")
    assert g.verdict == RIGHT and "PMET: collapsed by edit 200" in g.feedback
    assert grading.grade_lifelong(shipped, "AlphaEdit").verdict == WRONG


@pytest.mark.parametrize("n", [0, 1])
def test_grades_serialize(n):
    g = grading.grade_lens({"answer": "x", "first_layer": n, "layers": [[]] * 4}, 0)
    assert set(g.to_dict()) == {"verdict", "score", "feedback", "choice", "truth"}


def test_step_11_asks_only_about_facts_the_model_answered_so_before_the_edit():
    """An implied fact that should stay but was not the model's top answer before the edit is no question a
    student can get right ("it stays" graded wrong, issue 60); nor is one that should move but already gave its
    answer. Such facts leave the question, its conclusion and its chart; in a part without the before-flag (built
    before it was recorded) a fact that should stay is asked only when its probability shows it was the top answer
    (above 0.5; the Space Needle's continent at 0.17 is not asked)."""
    def fact(prompt, move, top=None, p=0.5):
        f = {"criterion": "logical" if move else "specificity", "prompt": prompt, "answer": " X", "move": move,
             "p_before": p}
        return f if top is None else {**f, "top1_before": top}

    def outcome(ok):
        return {"p_after": 0.5, "top1": ok, "verdict": "stayed" if ok else "failed"}

    out = {"facts": [fact("kept", False, True), fact("never top", False, False), fact("moves", True, False),
                     fact("already there", True, True), fact("old part, a guess", False, None, 0.05),
                     fact("old part, 0.17", False, None, 0.17), fact("old part, known", False, None, 0.6)],
           "methods": {"rome": {"label": "ROME", "outcomes": [outcome(True), outcome(False), outcome(True),
                                                               outcome(True), outcome(False), outcome(False),
                                                               outcome(True)]}},
           "message": ""}
    rows = grading.ripple_rows(out)
    assert [r["prompt"] for r in rows] == ["kept", "moves", "old part, known"]
    asked = grading.ripple_asked(out)
    assert [f["prompt"] for f in asked["facts"]] == [r["prompt"] for r in rows]
    assert len(asked["methods"]["rome"]["outcomes"]) == 3
    g = grading.grade_ripple(out, ["kept", "moves", "old part, known"])
    assert g.verdict == RIGHT and "never top" not in g.feedback
