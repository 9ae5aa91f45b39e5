"""The Lesson page (Streamlit AppTest) on a tiny pack: every step renders from the pack without touching the model,
right and wrong answers get the feedback the pack's numbers give, the answers reach the student's download and the
class's counts, "try your own" runs through the job queue, and the teacher mode shows, clears and adds."""
import json
import re
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from editkit.lesson.classroom import ClassStore, default_path
from editkit.lesson.pack import Pack
from lesson_util import answers_for, tiny_pack

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
        charts_before = {c.key for c in at.get("plotly_chart")}
        click(at, "Skip: just show me")
        ok(at)
        charts = {c.key for c in at.get("plotly_chart")}
        assert charts - charts_before, step  # the result appeared after the question
        assert not any("_grid_" in k for k in charts), step  # the grid to click went with the form
        assert any("Skipped" in c.value for c in at.caption), step
        assert at.get("expander"), step  # "try your own" (and the reference text where a section exists)
        if step == 4:  # the column that answers the question next to the memory (off-screen at 1,400 px)
            columns = [list(d.value.columns) for d in at.dataframe]
            assert any(c[:1] == ["memory"] and c[1].startswith("has ") for c in columns), columns


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
    # the trace ends with what it says, as the pack's does (it ended with a bare heatmap, issue 60)
    said = " ".join(m.value for m in at.markdown)
    assert "Clean run: p" in said and "corrupted" in said and "the strongest state" in said
    at.text_input(key="lesson_own_tsubject_2").set_value("Space Needle")  # not in the prompt: a clear message
    click(at, "Run it")
    assert not at.exception and any("does not occur" in e.value for e in at.error)
    assert at.session_state["lesson_own_2"]["traces"]["hidden"] == hidden  # the earlier result stays


def test_try_your_own_traces_on_two_models(env):
    """Step 2's "try your own" traces the student's prompt on the lesson's model and a second one, drawn on one
    relative-depth axis; each model's trace is the one it gives alone."""
    from editkit.lesson.compute import Settings, traces
    from editkit.model.loading import load_model
    at = open_lesson(timeout=300)
    go(at, 2)
    at.number_input(key="lesson_own_samples_2").set_value(2)
    at.selectbox(key="lesson_own_model_2").set_value("tiny-llama")
    click(at, "Run it")
    ok(at)
    own = at.session_state["lesson_own_2"]
    first = own["traces"]["hidden"]["meta"]["model"]
    assert set(own["both"]) == {first, "tiny-llama"}
    assert any(c.key == "lesson_own_depth_2" for c in at.get("plotly_chart"))
    pack = Settings.from_dict(Pack.open(env.folder).manifest.get("settings"))
    s = Settings(**{**pack.to_dict(), "samples": 2})
    prompt, subject = (at.text_input(key=f"lesson_own_t{k}_2").value for k in ("prompt", "subject"))
    alone = traces(load_model("tiny-llama", device="cpu"), prompt, subject, None, s, kinds=("hidden",),
                   sever=False)["traces"]["hidden"]
    assert own["both"]["tiny-llama"]["scores"] == alone["scores"]


@pytest.mark.parametrize("step", [3, 4, 5, 6, 7, 8, 9, 10, 11])
def test_try_your_own_at_every_step(env, step):
    at = open_lesson(timeout=600)
    go(at, step)
    if step == 3:
        at.number_input(key="lesson_own_samples_3").set_value(2)
    if step == 9:
        at.text_input(key="lesson_own_layers_9").set_value("0,2")
    if step == 10:
        at.number_input(key="lesson_own_life_n").set_value(4)
        at.number_input(key="lesson_own_life_batch").set_value(2)
    click(at, "Run it")
    ok(at)
    own = at.session_state[f"lesson_own_{step}"]
    expect = {3: lambda r: set(r["traces"]) == {"mlp", "attn"} and r["severing"],
              4: lambda r: r["memories"] and r["layer"] == 0,
              5: lambda r: r["rome"]["target_new"] == " Rome",
              6: lambda r: r["trace"]["answer"] and r["layers"],
              7: lambda r: r["rows"] and r["method"] == "rome",
              8: lambda r: set(r) == set(env.manifest["method_names"]),
              9: lambda r: [row["layer"] for row in r["rows"]] == [0, 2],
              10: lambda r: set(r["results"]) == {"rome", "memit"},
              11: lambda r: r["request"]["target_new"] == " Rome" and ("rows" in r or r["message"])}[step]
    assert expect(own), own


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
    first = table["first answers right / close / wrong"][0]
    assert sum(map(int, first.split(" / "))) == 1  # the student's first answer, graded
    at.checkbox(key="lesson_clear_confirm").check().run()
    click(at, "Clear the class's answers")
    assert any("Cleared 1 answer" in s.value for s in at.success)
    assert ClassStore(default_path()).count() == 0


def _teacher_on_own_pack(env, tmp_path, monkeypatch) -> tuple:
    """A copy of the test pack served to a teacher: (its folder, the Lesson page opened in teacher mode)."""
    own = tmp_path / "pack"
    shutil.copytree(env.folder, own)
    monkeypatch.setenv("EDITKIT_LESSON", str(own))
    at = AppTest.from_file(APP, default_timeout=600)
    at.query_params["teacher"] = "1"
    at.switch_page("pages/lesson.py").run()
    ok(at)
    return own, at


def test_teacher_adds_a_fact_from_the_page(env, tmp_path, monkeypatch):
    own, at = _teacher_on_own_pack(env, tmp_path, monkeypatch)
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
    assert any(s.value.startswith("Added “The Space Needle is in downtown → turn”") for s in at.success)
    pack = Pack.open(own)
    assert len(pack.fact_ids) == 2 and pack.missing(pack.fact_ids[1]) == []
    assert len(at.selectbox(key="lesson_fact").options) == 2


def test_the_add_a_fact_estimate_says_what_it_is_based_on(tmp_path, monkeypatch):
    """The shipped pack on a server that has computed nothing yet: the estimate is the idle benchmark's few minutes
    plus the model's first-use statistics with their size, and says so (it said "about 2 min" for a first fact
    that took 47 under load, issue 60; before that "about 24 min", from the seconds the shipped facts took when
    they were built on a loaded machine before a speed-up); on a busy machine it says how busy and scales; once
    this server has timed the parts, it says it is from them."""
    from editkit.lesson import compute, timing
    from editkit.lesson.pack import SHIPPED

    monkeypatch.delenv("EDITKIT_LESSON", raising=False)
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))
    others = [0.0]
    monkeypatch.setattr(timing, "others_now", lambda: others[0])  # an idle machine, then a busy one
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["teacher"] = "1"
    at.switch_page("pages/lesson.py").run()
    ok(at)

    def said():  # the estimate's sentence and the caption under it
        head = next(m.value for m in at.markdown if "for a fact with one new target" in m.value)
        return head + " | " + next(c.value for c in at.caption if c.value.startswith(("First-use", "The parts'")))

    text = said()
    m = re.search(r"about (\d+) min for a fact with one new target, (\d+) min with two, of which (\d+) min for the "
                  r"model's first-use statistics \(computed once on this server\)", text)
    assert m and 2 <= int(m.group(1)) - int(m.group(3)) <= 5, text  # the parts: the benchmark's few minutes
    assert "(18 layers × 20,000 WikiText tokens in 3 passes, 302 MB in the cache)" in text
    assert "benchmark" in text and "nothing was computed on this server yet" in text and "busy" not in text
    assert "Students can open its first steps about " in text
    others[0] = 6.0  # three times as many threads as cores besides the build
    at.run()
    assert "the machine is busy now (load average 6.0 on " in said()
    others[0] = 0.0
    from editkit.lesson.timing import COST, remember

    shipped = Pack.open(SHIPPED)
    s = compute.Settings.for_new_facts(shipped.manifest["settings"])
    remember(shipped.model, s, "trace", COST["trace"] + 600, others=0)  # this server's trace took 10 min longer
    at.run()
    assert "when this server last computed it" in said() and not re.search(r"about [2-4] min for a fact", said())


def test_add_the_fact_right_after_a_cancel_waits_for_the_cancelled_job(env, tmp_path, monkeypatch):
    """Cancel starts the session's next script run at once, while the cancelled build computes on until its next
    progress step and holds the session's one job slot. "Add the fact" clicked in that window was refused ("this
    session already has 1 long job(s) running", the likely cause of an add seen in Chromium to start nothing);
    now the cancelled job is stopped and the new one waits for it, then adds the fact."""
    import threading
    import time

    from editkit.core.errors import Cancelled
    from editkit.runtime import jobs

    _, at = _teacher_on_own_pack(env, tmp_path, monkeypatch)
    at.session_state["_editkit_session"] = "teacher-tab"
    old = jobs.Job("adding a fact to the lesson", owner="teacher-tab")
    started, outcome = threading.Event(), []

    def cancelled_run():  # the stopped run's build: between two progress steps for up to 20 s
        try:
            with jobs.QUEUE.slot(old):
                started.set()
                end = time.time() + 20
                while time.time() < end:
                    time.sleep(0.5)
                    old.progress(0.3, "causal traces")
            outcome.append("ran on")
        except Cancelled:
            outcome.append("stopped")

    t = threading.Thread(target=cancelled_run, daemon=True)
    t.start()
    assert started.wait(10)
    at.text_input(key="lesson_add_prompt").set_value("The {} is in downtown")
    at.text_input(key="lesson_add_subject").set_value("Space Needle")
    at.text_input(key="lesson_add_true").set_value("turn")
    at.text_input(key="lesson_add_targets").set_value("Seattle")
    click(at, "Add the fact")
    t.join(30)
    ok(at)
    assert outcome == ["stopped"] and old.state == "cancelled"
    assert any(s.value.startswith("Added “The Space Needle is in downtown → turn”") for s in at.success)


def test_a_folder_that_is_no_pack_gets_a_message(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_LESSON", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=60)
    at.switch_page("pages/lesson.py").run()
    assert not at.exception and any("not a lesson pack" in e.value for e in at.error)


def test_answer_again_clears_the_pick_everywhere(env):
    """After "Answer again" on a grid step, neither the grid nor the form shows the old pick, and "Check" without a
    new pick asks for one (it used to grade token 0, layer 0 and count it for the class)."""
    pack = env
    [fid] = pack.fact_ids
    at = open_lesson()
    go(at, 2)
    answer(at, fid, answers_for(pack, fid)[2], answers_for(pack, fid)[2][-1])
    click(at, "Answer again")
    ok(at)
    keys = (f"lesson_q2_token_{fid}", f"lesson_q2_layer_{fid}", f"lesson_q2_grid_{fid}")
    assert at.session_state[keys[2]]["selection"]["points"] == []  # the grid drawn anew, nothing picked
    assert at.selectbox(key=keys[0]).value is None and at.number_input(key=keys[1]).value is None
    click(at, "Check my answer")
    assert not at.exception and any("pick a cell first" in e.value for e in at.error)
    assert ClassStore(default_path()).count() == 1  # only the first answer was counted


def test_the_class_keeps_its_answers_when_a_fact_is_added(env, tmp_path, monkeypatch):
    """A student answers; the teacher adds a fact (the pack served from another folder, a fact published into
    it): the teacher view still shows the class's answer, the fact named in words, not by its folder."""
    pack = env
    at = open_lesson()
    click(at, "Check my answer")
    grown = tmp_path / "grown"
    shutil.copytree(pack.folder, grown)
    [fid] = pack.fact_ids
    shutil.copytree(grown / "facts" / fid, grown / "facts" / "another-fact-123abc")
    manifest = json.loads((grown / "manifest.json").read_text())
    manifest["facts"].append("another-fact-123abc")
    (grown / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("EDITKIT_LESSON", str(grown))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["teacher"] = "1"
    at.switch_page("pages/lesson.py").run()
    ok(at)
    assert len(at.selectbox(key="lesson_fact").options) == 2
    table = at.dataframe[-1].value
    assert list(table["students"]) == [1]
    # one table per fact, named above it in words (a fact column pushed the answers off-screen, seen in Chromium)
    # (and the answers beside the step: after the counts they were off-screen at 1,400 px, issue 60)
    assert "fact" not in table.columns and list(table.columns[:2]) == ["step", "answers (most frequent first)"]
    assert any(m.value == "**The Eiffel Tower is located in the city of → B**" for m in at.markdown)
    sidebar = " ".join(c.value for c in at.sidebar.caption)
    assert "git" not in sidebar and pack.manifest["fingerprint"] not in sidebar
    estimate = next(m.value for m in at.markdown if "for a fact with one new target" in m.value)
    assert re.search(r"about (\d+ s|[1-9]\d* min) for a fact with one new target", estimate), estimate  # not "0 min"
    at.session_state["lesson_add_cancelled"] = True
    at.run()
    assert any("cancelled" in i.value and "unchanged" in i.value for i in at.info)


def test_a_cancel_that_comes_after_the_fact_is_published_says_it_is_added(env):
    """Cancel pressed while the build finished its last part (seen in Chromium: the fact was in the students' list
    while the page said "the students' pack is unchanged (the fact is not in it)"): the message follows the pack,
    not the click."""
    pack = env
    [fid] = pack.fact_ids
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["teacher"] = "1"
    at.switch_page("pages/lesson.py").run()
    ok(at)
    at.session_state["lesson_adding"] = (pack.fact(fid)["key"], [])  # the job began before this fact was published
    at.session_state["lesson_add_cancelled"] = True
    at.run()
    ok(at)
    assert not any("unchanged" in i.value for i in at.info)
    assert any(s.value.startswith("The cancel came too late") and "The Eiffel Tower" in s.value
               for s in at.success)
    at.session_state["lesson_adding"] = ("another key", [])  # the job's fact is not in the pack: cancelled
    at.session_state["lesson_add_cancelled"] = True
    at.run()
    assert any("cancelled" in i.value and "unchanged" in i.value for i in at.info)
    assert not any(s.value.startswith("The cancel came too late") for s in at.success)


def test_step_8_names_the_packs_methods(env, tmp_path, monkeypatch):
    """Step 8's heading lists the methods the pack was built with, not every registered one (seen in Chromium: six
    methods in the heading above the shipped pack's table of four)."""
    own = tmp_path / "pack"
    shutil.copytree(env.folder, own)
    manifest = json.loads((own / "manifest.json").read_text())
    manifest["methods"], manifest["method_names"] = manifest["methods"][:2], manifest["method_names"][:2]
    (own / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("EDITKIT_LESSON", str(own))
    at = open_lesson()
    first, second = (m["label"] for m in manifest["methods"])
    intro = next(m.value for m in at.markdown if "locate-then-edit" in m.value)  # step 1's opening paragraph
    assert f"(this lesson: {first} and {second}; editkit also has " in intro, intro
    go(at, 8)
    headings = [h.value for h in at.header if h.value.startswith("Step 8.")]
    assert headings == [f"Step 8. {first} and {second} side by side"], headings


def test_the_ripple_step_renders_from_the_pack(env, monkeypatch):
    """Step 11 reads the pack's ripple part (computed by the builder): its question, or the model's lack of any
    implied fact in words."""
    from editkit.lesson import grading

    def no_model(*args, **kwargs):
        raise AssertionError("a step computed on the model")

    monkeypatch.setattr("editkit.lesson.compute.ripple", no_model)
    [fid] = env.fact_ids
    out = env.part(fid, "ripple-0")
    assert out is not None and "facts" in out and "message" in out
    at = open_lesson()
    go(at, 11)
    subject = env.fact(fid)["request"]["subject"]  # the title names this fact's subject, not the Eiffel Tower's
    assert any(h.value.startswith("Step 11. Which of ") and subject[4:] in h.value and "Ripple effects" in h.value
               for h in at.header), [h.value for h in at.header]
    if grading.ripple_rows(out):
        assert any("Your prediction first." in m.value for m in at.markdown)
    else:
        assert any("no implied fact the model knows" in i.value for i in at.info)


def test_the_ripple_step_says_its_result_from_the_numbers(env, tmp_path, monkeypatch):
    """Step 11 on the shipped pack's first ripple part (two implied facts, ROME and the in-context reference tied):
    the conclusion is said from the part's numbers ("Both score the same", seen in Chromium as the pack's stored
    "All 2 score the same"), the question's input says what it asks, and a wrong answer's feedback counts out of how
    many ("You classified 0 correctly" said nothing about how many there were) and says what counts (the Space
    Needle's continent read "0.166 → 0.190 (failed)" with no reason)."""
    from editkit.lesson import grading
    from editkit.lesson.pack import SHIPPED

    own = tmp_path / "pack"
    shutil.copytree(env.folder, own)
    [fid] = env.fact_ids
    shipped = Pack.open(SHIPPED)
    out = shipped.part(shipped.fact_ids[0], "ripple-0")
    assert out["conclusion"].startswith("All 2 score the same")  # what the pack stores
    (own / "facts" / fid / "ripple-0.json").write_text(json.dumps(out))
    monkeypatch.setenv("EDITKIT_LESSON", str(own))
    rows = grading.ripple_rows(out)
    at = open_lesson()
    go(at, 11)
    picker = at.multiselect(key=f"lesson_q11_{fid}_0")
    assert picker.label == "They will give their expected answer"
    picker.set_value([r["prompt"] for r in rows if not r["passed"]])  # every fact misjudged
    click(at, "Check my answer")
    ok(at)
    assert any(f"You classified 0 of {len(rows)} correctly" in w.value for w in at.warning), \
        [w.value for w in at.warning]
    # what "ended as it should" means: the top answer, not a rise of P (Space Needle: 0.166 → 0.190, "failed")
    assert any("the model's top answer after the edit" in w.value for w in at.warning)
    said = [m.value for m in at.markdown if "score the same" in m.value]
    assert said and said[0].startswith("**Both score the same here") and not any("All 2" in m for m in said), said


def test_the_new_target_is_kept_across_steps_and_facts(env, tmp_path, monkeypatch):
    """The new target picked at step 5 is still picked after a step without the picker (9) and after another fact,
    with the answer given for it (seen in Chromium: back from another fact, step 5 showed the first target and an
    empty question, the answer given for the second gone from view)."""
    pack = env
    [fid] = pack.fact_ids
    grown = tmp_path / "grown"
    shutil.copytree(pack.folder, grown)
    shutil.copytree(grown / "facts" / fid, grown / "facts" / "another-fact-123abc")
    other = grown / "facts" / "another-fact-123abc" / "fact.json"
    fact = json.loads(other.read_text())
    fact["request"]["subject"] = fact["request"]["subject"].upper()  # a label of its own in the fact list
    fact["request"]["prompt"] = fact["request"]["prompt"].upper()  # ("{}" has no case)
    other.write_text(json.dumps(fact))
    manifest = json.loads((grown / "manifest.json").read_text())
    manifest["facts"].append("another-fact-123abc")
    (grown / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("EDITKIT_LESSON", str(grown))
    at = open_lesson()
    at.selectbox(key="lesson_fact").set_value(fid).run()
    go(at, 5)
    assert len(pack.fact(fid)["targets"]) == 2
    at.selectbox(key=f"lesson_target_{fid}").set_value(1).run()
    click(at, "Skip: just show me")
    ok(at)
    go(at, 9)
    go(at, 5)
    assert at.selectbox(key=f"lesson_target_{fid}").value == 1
    assert any("Skipped" in c.value for c in at.caption)  # the answer for that target shows
    at.selectbox(key="lesson_fact").set_value("another-fact-123abc").run()
    ok(at)
    at.selectbox(key="lesson_fact").set_value(fid).run()
    ok(at)
    assert at.selectbox(key=f"lesson_target_{fid}").value == 1
    assert any("Skipped" in c.value for c in at.caption)


def test_a_fact_being_built_is_served_step_by_step(env, tmp_path, monkeypatch):
    """A teacher's new fact while it is built (issue 58): listed for the students once its first steps' parts are
    written, marked as being built; its open steps render, a step whose parts are still computed says when it
    opens (from the build's status) instead of its question, and opens once they are written; a build that stops
    beating (killed) withdraws the fact, and the student is told so."""
    import time

    from editkit.lesson.pack import STALE

    pack = env
    [fid] = pack.fact_ids
    grown = tmp_path / "grown"
    shutil.copytree(pack.folder, grown)
    new = grown / "facts" / "another-fact-123abc"
    new.mkdir()
    fact = json.loads((grown / "facts" / fid / "fact.json").read_text())
    fact["request"]["subject"] = fact["request"]["subject"].upper()
    fact["request"]["prompt"] = fact["request"]["prompt"].upper()
    (new / "fact.json").write_text(json.dumps(fact))
    for part in ("lens", "trace"):  # what a build has written after its first two parts
        shutil.copy(grown / "facts" / fid / f"{part}.json", new / f"{part}.json")
    now = time.time()
    status = {"fact": new.name, "key": "k", "pid": 1, "started": now - 40, "heartbeat": now, "units": [
        {"what": "FFN memories", "parts": ["memories"], "steps": [4], "target": None, "state": "computing",
         "ends": now + 50, "expected": 3, "seconds": None},
        {"what": "rome edit", "parts": ["edit-0-rome", "retrace-0-rome"], "steps": [5, 6, 8], "target": 0,
         "state": "waiting", "ends": now + 200, "expected": 12, "seconds": None}]}

    def beat():  # the build's heartbeat (a slow test machine outlasts STALE between two runs)
        (new / "building.json").write_text(json.dumps({**status, "heartbeat": time.time()}))

    beat()
    monkeypatch.setenv("EDITKIT_LESSON", str(grown))
    at = open_lesson()
    picker = at.selectbox(key="lesson_fact")
    assert picker.options[-1].endswith("(being built)") and len(picker.options) == 2
    beat()
    picker.set_value(new.name).run()
    ok(at)
    assert any("Being built now: steps 1–3 and 10 open" in c.value for c in at.sidebar.caption)
    assert any("Your prediction first." in m.value for m in at.markdown)  # step 1 is open
    beat()
    go(at, 2)
    assert any("Your prediction first." in m.value for m in at.markdown)
    beat()
    go(at, 4)
    note = " ".join(i.value for i in at.info)
    assert re.search(r"Step 4 opens in about \d+ s\.", note), note
    assert not any("Your prediction first." in m.value for m in at.markdown)
    beat()
    go(at, 6)
    assert any("Step 6 opens" in i.value for i in at.info)  # every method's edit and re-trace, not ROME's alone
    shutil.copy(grown / "facts" / fid / "memories.json", new / "memories.json")  # the part lands
    beat()
    go(at, 4)
    assert any("Your prediction first." in m.value for m in at.markdown) and not any("opens" in i.value
                                                                                    for i in at.info)
    (new / "building.json").write_text(json.dumps({**status, "heartbeat": now - STALE - 1}))  # the build died
    at.run()
    ok(at)
    assert len(at.selectbox(key="lesson_fact").options) == 1
    assert any("no longer served" in i.value for i in at.sidebar.info)


def test_the_sidebar_says_when_each_fact_was_built(env, tmp_path, monkeypatch):
    """After a fact was added the sidebar said the whole pack was "built (28 Nov 2026)", though the shipped facts
    were older (issue 60): each fact says when it was built, the pack's first ones at the pack's creation."""
    pack = env
    [fid] = pack.fact_ids
    grown = tmp_path / "grown"
    shutil.copytree(pack.folder, grown)
    shutil.copytree(grown / "facts" / fid, grown / "facts" / "another-fact-123abc")
    other = grown / "facts" / "another-fact-123abc" / "fact.json"
    fact = json.loads(other.read_text())
    fact["request"]["subject"] = fact["request"]["subject"].upper()  # a label of its own in the fact list
    other.write_text(json.dumps(fact))
    manifest = json.loads((grown / "manifest.json").read_text())
    manifest["facts"].append("another-fact-123abc")
    manifest["created"], manifest["updated"] = "2026-11-23T15:13:12", "2026-11-28T10:00:00"
    manifest["built"] = {"another-fact-123abc": "2026-11-28T10:00:00"}
    (grown / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("EDITKIT_LESSON", str(grown))
    at = open_lesson()
    at.selectbox(key="lesson_fact").set_value(fid).run()
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "Built 23 Nov 2026." in captions and "28 Nov" not in captions
    at.selectbox(key="lesson_fact").set_value("another-fact-123abc").run()
    assert "Built 28 Nov 2026." in " ".join(c.value for c in at.sidebar.caption)
