"""The Lesson page (Streamlit AppTest) on a tiny pack: every step renders from the pack without touching the model,
right and wrong answers get the feedback the pack's numbers give, the answers reach the student's download and the
class's counts, "try your own" runs through the job queue, and the teacher mode shows, clears and adds."""
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from editkit.lesson import compute, grading
from editkit.lesson.classroom import ClassStore, default_path
from editkit.lesson.pack import Pack
from lesson_util import tiny_pack

APP = str(Path(__file__).resolve().parent.parent / "app.py")


@pytest.fixture(scope="module")
def pack_dir(tmp_path_factory):
    return tiny_pack(tmp_path_factory)


@pytest.fixture
def env(pack_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_LESSON", str(pack_dir))
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))  # a fresh class database
    monkeypatch.delenv("EDITKIT_TEACHER_PASSPHRASE", raising=False)
    return Pack.open(pack_dir)


def open_lesson(timeout: int = 120) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.switch_page("pages/lesson.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def go(at: AppTest, step: int) -> None:
    at.radio(key="lesson_step").set_value(step).run()
    ok(at)


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def click(at: AppTest, label: str) -> None:
    buttons = [b for b in at.button if b.label == label]
    assert buttons, (label, [b.label for b in at.button])
    buttons[0].click().run()


def test_every_step_renders_from_the_pack_without_the_model(env, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("a step computed on the model")

    monkeypatch.setattr("pages.ui.get_lm", no_model)
    for name in ("lens", "traces", "memories", "edit", "retrace", "bleed", "layer_sweep", "load"):
        monkeypatch.setattr(f"editkit.lesson.compute.{name}", no_model)
    at = open_lesson()
    assert "Lesson: locate, then edit" in at.title[0].value
    for step in range(1, 11):
        go(at, step)
        assert any("Your prediction first." in m.value for m in at.markdown), step
        charts_before = len(at.get("plotly_chart"))
        click(at, "Skip: just show me")
        ok(at)
        assert len(at.get("plotly_chart")) > charts_before, step  # the result appeared after the question
        assert any("Skipped" in c.value for c in at.caption), step
        assert at.get("expander"), step  # "try your own" (and the reference text where a section exists)


def answers_for(pack: Pack, fid: str) -> dict:
    """step -> (widget setter, a right answer, a wrong answer), from the pack's own numbers."""
    lens = pack.part(fid, "lens")
    tr = pack.part(fid, "trace")
    hidden, sev = tr["traces"]["hidden"], tr["severing"]
    mem = pack.part(fid, "memories")
    edit = pack.part(fid, "edit-0-rome")
    retrace = pack.part(fid, "retrace-0-rome")
    bleed = pack.part(fid, "bleed-0")
    edits = {m: pack.part(fid, f"edit-0-{m}") for m in pack.manifest["method_names"]}
    sweep = pack.part(fid, "sweep")
    lifelong_truth = grading.first_collapse(compute.lifelong()["results"])

    def cells(trace):
        early = grading.sites(trace)["early"]
        n_tok, n_lay = len(trace["tokens"]), len(trace["scores"][0])
        wrong = next((t, l) for t in range(n_tok - 1) for l in range(n_lay)
                     if grading.grade_cell(trace, t, l).verdict == "wrong")
        return early, wrong

    far_layer = max(range(len(lens["layers"])), key=lambda l: abs(l - lens["first_layer"]))
    moved = [r["prompt"] for r in grading.neighbours(bleed) if grading.moved(r)]
    still = [r["prompt"] for r in grading.neighbours(bleed) if not grading.moved(r)]
    says = [m for m, e in edits.items() if grading.says_new(e)]
    truth_bin = grading.bin_of(edit["probabilities"]["post"]["rewrite"][0]["p_new"])
    return {
        1: ("slider", f"lesson_q1_{fid}", lens["first_layer"], far_layer),
        2: ("cell", 2, *cells(hidden)),
        3: ("radio", f"lesson_q3_{fid}", grading.severing_truth(sev), (grading.severing_truth(sev) + 1) % 3),
        4: ("radio", f"lesson_q4_{fid}", "yes" if grading.memory_hits(mem) else "no",
            "no" if grading.memory_hits(mem) else "yes"),
        5: ("radio", f"lesson_q5_{fid}_0", truth_bin, 3 if truth_bin < 2 else 0),
        6: ("cell", 6, *cells(retrace)),
        7: ("multiselect", f"lesson_q7_{fid}_0", moved, still),
        8: ("multiselect", f"lesson_q8_{fid}_0", says, [m for m in edits if m not in says]),
        9: ("radio", f"lesson_q9_{fid}", "yes" if grading.sweep_truth(sweep) else "no",
            "no" if grading.sweep_truth(sweep) else "yes"),
        10: ("radio", f"lesson_q10_{fid}", lifelong_truth, "AlphaEdit" if lifelong_truth != "AlphaEdit" else "ROME"),
    }


def answer(at: AppTest, fid: str, spec, value) -> None:
    kind = spec[0]
    if kind == "cell":
        n = spec[1]
        at.selectbox(key=f"lesson_q{n}_token_{fid}").set_value(value[0])
        at.number_input(key=f"lesson_q{n}_layer_{fid}").set_value(value[1])
    else:
        getattr(at, kind)(key=spec[1]).set_value(value)
    click(at, "Check my answer")
    ok(at)


def test_right_and_wrong_answers_get_their_feedback(env):
    pack = env
    [fid] = pack.fact_ids
    specs = answers_for(pack, fid)
    at = open_lesson()
    for step in range(1, 11):
        go(at, step)
        spec = specs[step]
        answer(at, fid, spec, spec[-1])  # a wrong answer first
        assert at.warning or at.info, step
        feedback = " ".join(b.value for b in [*at.warning, *at.info])
        assert "Wrong" in feedback or "Close" in feedback, (step, feedback)
        click(at, "Answer again")
        answer(at, fid, spec, spec[-2])
        assert any(s.value.startswith("**Right**") for s in at.success), (step, [s.value for s in at.success])
    mine = at.session_state["lesson_answers"]
    assert len(mine) == 10 and all(a["grade"]["verdict"] == "right" for a in mine.values())
    assert {b.label for b in at.get("download_button")} >= {"CSV", "JSON"}
    counts = ClassStore(default_path()).summary(next(iter(_lessons())))
    assert len(counts) == 10 and all(c["students"] == 1 and c["right"] == 1 for c in counts)


def _lessons():
    import sqlite3

    with sqlite3.connect(default_path()) as db:
        return [r[0] for r in db.execute("SELECT DISTINCT lesson FROM answers")]


def test_try_your_own_runs_as_a_job(env):
    at = open_lesson(timeout=300)
    at.text_input(key="lesson_own_prompt_1").set_value("The Space Needle is in downtown")
    click(at, "Run it")
    ok(at)
    own = at.session_state["lesson_own_1"]
    assert own["prompt"] == "The Space Needle is in downtown" and len(own["layers"]) == 4
    go(at, 2)
    at.number_input(key="lesson_own_samples_2").set_value(2)
    click(at, "Run it")
    ok(at)
    hidden = at.session_state["lesson_own_2"]["traces"]["hidden"]
    assert hidden["samples"] == 2 and hidden["meta"]["prompt"] == "The Eiffel Tower is located in the city of"
    at.text_input(key="lesson_own_tsubject_2").set_value("Space Needle")  # not in the prompt: a clear message
    click(at, "Run it")
    assert not at.exception and any("does not occur" in e.value for e in at.error)
    assert at.session_state["lesson_own_2"]["traces"]["hidden"] == hidden  # the earlier result stays


def test_teacher_sees_and_clears_the_class_answers(env, monkeypatch):
    monkeypatch.setenv("EDITKIT_TEACHER_PASSPHRASE", "owl")
    at = open_lesson()
    assert not any(h.value == "Teacher" for h in at.header)
    at.text_input(key="lesson_teacher_pass").set_value("wrong").run()
    assert not any(h.value == "Teacher" for h in at.header)
    click(at, "Check my answer")  # one student's answer to step 1
    at.text_input(key="lesson_teacher_pass").set_value("owl").run()
    ok(at)
    assert any(h.value == "Teacher" for h in at.header)
    table = at.dataframe[-1].value
    assert list(table["students"]) == [1]
    at.checkbox(key="lesson_clear_confirm").check().run()
    click(at, "Clear the class's answers")
    assert any("Cleared 1 answer" in s.value for s in at.success)
    assert ClassStore(default_path()).count() == 0


def test_teacher_adds_a_fact_from_the_page(env, tmp_path, monkeypatch):
    own = tmp_path / "pack"
    shutil.copytree(env.folder, own)
    monkeypatch.setenv("EDITKIT_LESSON", str(own))
    at = AppTest.from_file(APP, default_timeout=600)
    at.query_params["teacher"] = "1"
    at.switch_page("pages/lesson.py").run()
    ok(at)
    at.text_input(key="lesson_add_prompt").set_value("The {} is in downtown")
    at.text_input(key="lesson_add_subject").set_value("Space Needle")
    at.text_input(key="lesson_add_true").set_value("Paris")  # tiny-gpt2 does not know that
    at.text_input(key="lesson_add_targets").set_value("Seattle")
    click(at, "Add the fact")
    assert not at.exception and any("does not know this fact" in e.value and "it predicts" in e.value
                                    for e in at.error)
    at.text_input(key="lesson_add_true").set_value("turn")  # what it predicts
    click(at, "Add the fact")
    ok(at)
    assert any(s.value.startswith("Added: space-needle") for s in at.success)
    pack = Pack.open(own)
    assert len(pack.fact_ids) == 2 and pack.missing(pack.fact_ids[1]) == []
    assert len(at.selectbox(key="lesson_fact").options) == 2


def test_a_folder_that_is_no_pack_gets_a_message(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_LESSON", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=60)
    at.switch_page("pages/lesson.py").run()
    assert not at.exception and any("not a lesson pack" in e.value for e in at.error)
