"""`lesson build` end to end on a tiny model: a complete pack of JSON files, resumable part by part, and one clear
message naming the record for every bad facts file (before the model loads) and for a fact the model does not
know (with what it predicts instead)."""
import json
import os
import re
import shutil

import pytest

from editkit.cli import main
from editkit.core.errors import EditkitError
from editkit.lesson import compute
from editkit.lesson.build import build
from editkit.lesson.pack import FORMAT, KIND, Pack
from lesson_util import FACT, MODEL, SAMPLES, tiny_pack, write_facts


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    return Pack.open(tiny_pack(tmp_path_factory))


def test_the_pack_holds_every_part_as_json(pack):
    m = pack.manifest
    assert m["kind"] == KIND and m["format"] == FORMAT and m["model"] == MODEL
    assert len(m["fingerprint"]) >= 16 and m["editkit_version"]
    assert m["method_names"][0] == "rome" and {"memit", "pmet", "alphaedit"} <= set(m["method_names"])
    [fid] = pack.fact_ids
    assert pack.missing(fid) == []
    files = [p for p in pack.folder.rglob("*") if p.is_file()]
    assert files and all(p.suffix == ".json" for p in files)  # no pickle, nothing else
    fact = pack.fact(fid)
    assert [t.strip() for t in fact["targets"]] == ["Rome", "London"] and fact["known"]["known"]


def test_the_parts_are_the_steps_results(pack):
    [fid] = pack.fact_ids
    lens = pack.part(fid, "lens")
    assert lens["answer"] == " B" and lens["first_layer"] is not None
    assert lens["ranks"][lens["first_layer"]] == 0
    tr = pack.part(fid, "trace")
    assert set(tr["traces"]) == {"hidden", "mlp", "attn"} and tr["severing"]["token_str"]
    hidden = tr["traces"]["hidden"]
    assert hidden["answer"] == " B" and hidden["samples"] == SAMPLES
    assert len(hidden["scores"]) == len(hidden["tokens"]) and len(hidden["scores"][0]) == 4
    mem = pack.part(fid, "memories")
    t, layer = compute.subject_peak(tr["traces"]["mlp"])
    assert (mem["position"], mem["layer"]) == (t, layer) and mem["memories"][0]["value_text"]
    for target in (0, 1):
        for m in pack.manifest["method_names"]:
            edit = pack.part(fid, f"edit-{target}-{m}")
            assert edit["method"] == m and edit["target_new"] == [" Rome", " London"][target]
            assert edit["greedy"]["post"]["rewrite"] and "post_gen_efficacy" in edit["metrics"]
            retrace = pack.part(fid, f"retrace-{target}-{m}")
            assert retrace["answer"] == edit["target_new"][:len(retrace["answer"])]  # its first token
        bleed = pack.part(fid, f"bleed-{target}")
        assert {r["source"] for r in bleed["rows"]} >= {"rewrite", "neighborhood"}
    sweep = pack.part(fid, "sweep")
    assert [r["layer"] for r in sweep["rows"]] == [0, 1, 2, 3]
    assert sweep["trace"]["peak_layer"] == compute.subject_peak(tr["traces"]["mlp"])[1]


def test_a_rerun_computes_only_missing_parts(tmp_path):
    facts = write_facts(tmp_path)
    out = tmp_path / "pack"
    s = compute.Settings(samples=SAMPLES, sweep_layers="0,1")
    real = compute.layer_sweep

    def broken(*args, **kwargs):
        raise RuntimeError("interrupted")

    compute.layer_sweep = broken  # the build stops at the sweep; everything before it is on disk
    try:
        with pytest.raises(RuntimeError):
            build(facts, out, MODEL, methods=["rome", "memit"], settings=s)
    finally:
        compute.layer_sweep = real
    pack = Pack.open(out)
    assert pack.fact_ids == []  # a half-built fact is never served
    [fid] = [p.name for p in (out / "facts").iterdir()]
    # its finished parts wait, unlisted, for the next build; the first target's ripple effects (step 11) and the
    # second target's parts come after the sweep (step 9): the build goes in the order the steps open
    later = ["ripple-0", "edit-1-rome", "retrace-1-rome", "edit-1-memit", "retrace-1-memit", "bleed-1", "ripple-1"]
    assert sorted(pack.missing(fid)) == sorted(["sweep", *later])
    assert not (out / "facts" / fid / "building.json").exists()  # the failed build withdrew the fact
    exact = compute.Settings(**{**s.to_dict(), "trace_precision": "float32"})
    with pytest.raises(EditkitError, match="started with other settings: trace_precision 'bfloat16' "
                                           r"\(now 'float32'\); give the same options"):
        build(facts, out, MODEL, methods=["rome", "memit"], settings=exact)  # never half one way, half another
    again = build(facts, out, MODEL, methods=["rome", "memit"], settings=s)
    assert again["computed"] == 6 and again["skipped"] == again["parts"] - 6  # the sweep and the 5 units after it
    assert Pack.open(out).fact_ids == [fid]
    (out / "facts" / fid / "edit-1-memit.json").unlink()
    (out / "facts" / fid / "lens.json").write_text("{cut")  # a broken file is recomputed
    third = build(facts, out, MODEL, methods=["rome", "memit"], settings=s)
    assert third["computed"] == 2
    assert json.loads((out / "facts" / fid / "lens.json").read_text())["answer"] == " B"
    with pytest.raises(EditkitError, match="other settings or methods"):
        build(facts, out, MODEL, methods=["rome"], settings=s)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["fingerprint"] = "0" * 16
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(EditkitError, match="was built on"):
        build(facts, out, MODEL, methods=["rome", "memit"], settings=s)


def test_a_cancelled_fact_is_not_published_and_the_next_build_continues(tmp_path, pack):
    """What "Add a fact" does on the Lesson page: a build into the pack students are served, cancelled (a progress
    step raises Cancelled, as the page's Cancel button makes it) half way through the new fact. The served pack is
    the same as before; adding the fact again computes only its missing parts and then publishes it."""

    from editkit.core.errors import Cancelled

    served = tmp_path / "served"
    shutil.copytree(pack.folder, served)
    before = (served / "manifest.json").read_text()
    other = {**FACT, "prompt": "The {} is in downtown", "subject": "Space Needle", "target_true": "turn",
             "target_new": "Seattle", "lesson_targets": []}
    s = compute.Settings.from_dict(pack.manifest["settings"])
    steps = []

    def cancel_after_the_trace(fraction, message):
        steps.append(message)
        if "FFN memories" in message:
            raise Cancelled("adding a fact to the lesson was cancelled")

    with pytest.raises(Cancelled):
        build([other], served, MODEL, methods=pack.manifest["method_names"], settings=s,
              progress=cancel_after_the_trace)
    assert (served / "manifest.json").read_text() == before  # the students' pack is as it was
    assert Pack.open(served).fact_ids == pack.fact_ids
    new = [p.name for p in (served / "facts").iterdir() if p.name not in pack.fact_ids]
    assert len(new) == 1 and (served / "facts" / new[0] / "trace.json").exists()
    done = build([other], served, MODEL, methods=pack.manifest["method_names"], settings=s)
    assert done["skipped"] == 2 and done["computed"] == done["parts"] - 2  # the lens and the trace were kept
    assert Pack.open(served).fact_ids == pack.fact_ids + new and Pack.open(served).missing(new[0]) == []
    assert Pack.open(served).building_ids() == [] and not (served / "facts" / new[0] / "building.json").exists()
    assert Pack.open(served).built(new[0]) > pack.manifest["created"]  # its own time, not the pack's


def test_a_fact_is_served_step_by_step_while_it_is_built(tmp_path, pack):
    """A teacher's new fact is served to students as soon as the parts of its first steps are written (the lens
    and the traces), each later step opening once its parts are (issue 58); the build goes in the order the steps
    open; the status says each part's steps and expected end. A build that stops (here: cancelled) withdraws the
    fact at once, and one that was killed (no heartbeat) is served no more."""
    import time

    from editkit.core.errors import Cancelled
    from editkit.lesson import building
    from editkit.lesson.pack import STALE

    served = tmp_path / "served"
    shutil.copytree(pack.folder, served)
    other = {**FACT, "prompt": "The {} is in downtown", "subject": "Space Needle", "target_true": "turn",
             "target_new": "Seattle", "lesson_targets": []}
    s = compute.Settings.from_dict(pack.manifest["settings"])
    seen = {}

    def look(fraction, message):
        for what in ("logit lens", "causal traces", "FFN memories", "rome edit", "layer sweep", "ripple effects"):
            if f": {what}" in message and what not in seen:
                now = Pack.open(served)
                fid = next(p.name for p in (served / "facts").iterdir() if p.name not in pack.fact_ids)
                seen[what] = (now.building_ids(), [n for n in range(1, 12) if not now.missing_for(fid, n, 0)],
                              building.status(served, fid))
        if ": ripple effects" in message:
            raise Cancelled("adding a fact to the lesson was cancelled")

    with pytest.raises(Cancelled):
        build([other], served, MODEL, methods=pack.manifest["method_names"], settings=s, progress=look)
    order = list(seen)
    assert order == ["logit lens", "causal traces", "FFN memories", "rome edit", "layer sweep", "ripple effects"]
    assert seen["logit lens"][0] == [] and seen["causal traces"][0] == []  # not served before its first steps
    fid = seen["FFN memories"][0][0]
    assert seen["FFN memories"][:2] == ([fid], [1, 2, 3, 10])  # served once the lens and the traces are written
    assert seen["rome edit"][1] == [1, 2, 3, 4, 10]
    assert seen["layer sweep"][1] == [1, 2, 3, 4, 5, 6, 7, 8, 10]  # every method's edit and the bleed map before it
    assert seen["ripple effects"][1] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    units = seen["layer sweep"][2]["units"]
    assert [u["state"] for u in units[:2]] == ["done", "done"] and units[-1]["state"] == "waiting"
    assert units[1]["steps"] == [2, 3] and units[-1]["steps"] == [11]
    ends = [u["ends"] for u in units]
    assert ends == sorted(ends)  # the parts to come, in order
    after = Pack.open(served)
    assert after.building_ids() == [] and after.served_ids() == pack.fact_ids  # withdrawn at once
    assert (served / "manifest.json").read_text() == (pack.folder / "manifest.json").read_text()
    stale = {**seen["ripple effects"][2], "heartbeat": time.time() - STALE - 1}  # a killed build's
    (served / "facts" / fid / "building.json").write_text(json.dumps(stale))
    assert Pack.open(served).building_ids() == []
    (served / "facts" / fid / "building.json").write_text(json.dumps({**stale, "heartbeat": time.time()}))
    assert Pack.open(served).building_ids() == [fid]  # (what a live build's status looks like)


def test_a_build_times_its_parts_on_this_machine_and_the_estimate_starts_from_them(pack, tmp_path, monkeypatch):
    """Every computed part's seconds go to the cache's timings/lesson/<model> (first-use statistics left out), with
    how busy the machine was; the estimate of the next fact is their sum on an idle machine, and says so. Before,
    it came from the seconds the pack's facts recorded when they were built (the shipped pack: about 24 min, on a
    loaded machine before a speed-up; a fact now takes about 3). The first estimate, on a cache without the
    model's statistics, includes them."""
    from editkit.lesson.timing import COST, busy, estimate, measured

    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))
    s = compute.Settings(samples=SAMPLES)
    served = tmp_path / "served"
    shutil.copytree(pack.folder, served)
    other = {**FACT, "prompt": "The {} is in downtown", "subject": "Space Needle", "target_true": "turn",
             "target_new": "Seattle", "lesson_targets": []}
    assert measured(MODEL, s) == {}
    one, how = estimate(Pack.open(served), 1, s, others=0)
    assert "this pack's 1 fact took" in how and "nothing was computed on this server yet" in how
    assert "first-use statistics, computed once on this server (4 layers" in how  # this cache has none yet
    out = build([other], served, MODEL, methods=pack.manifest["method_names"], settings=s)
    times = measured(MODEL, s)
    kinds = {"lens", "trace", "memories", "bleed", "ripple", "sweep"} | {f"edit {m}" for m in
                                                                         pack.manifest["method_names"]}
    assert set(times) == kinds and all(t["seconds"] >= 0 and t["others"] >= 0 for t in times.values())
    assert sum(t["seconds"] for t in times.values()) <= sum(p["seconds"] for p in out["profile"]) + 0.1

    def spent(n):  # every part as timed here on an idle machine, per target n times
        per = {k: n if k.startswith("edit ") or k in ("bleed", "ripple") else 1 for k in kinds}
        return sum(per[k] * times[k]["seconds"] / busy(times[k]["others"]) for k in kinds)

    def expected(n):  # the parts and the known-fact check, scaled by how the parts of a one-target fact ran
        cost = {k: COST[k.split()[0]] if k != "sweep" else COST["sweep_layer"] * 4 for k in kinds}
        return spent(n) + spent(1) / sum(cost.values()) * COST["check"]

    one, how = estimate(Pack.open(served), 1, s, others=0)
    two, _ = estimate(Pack.open(served), 2, s, others=0)
    assert one == pytest.approx(expected(1)) and two == pytest.approx(expected(2)) and two > one
    assert how.startswith("from how long each part took when this server last computed it, on ") and "kinds" not in how
    assert "statistics" not in how  # computed by the build: cached now
    assert estimate(Pack.open(served), 1, compute.Settings(samples=SAMPLES + 1), others=0)[1] != how  # other settings
    busier, said = estimate(Pack.open(served), 1, s, others=2 * os.cpu_count())
    assert busier == pytest.approx(3 * one) and "the machine is busy now" in said  # beside twice as many threads


def test_first_use_statistics_are_timed_apart(tiny_by_name, tmp_path, monkeypatch):
    """A part that computed first-use statistics is recorded without them (the next fact finds them cached)."""
    from editkit.editing import stats

    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))
    lm = tiny_by_name(MODEL)
    before = stats.spent()
    stats.second_moment(lm, [1], n_tokens=200)
    grew = stats.spent() - before
    assert grew > 0
    stats.second_moment(lm, [1], n_tokens=200)  # cached: no pass
    assert stats.spent() - before == grew


def test_the_shipped_pack_is_estimated_from_the_idle_benchmark_until_a_fact_is_computed_here(tmp_path, monkeypatch):
    """Nothing timed on this machine: the shipped (embedded-model) pack's estimate is the idle benchmark's ~2 min and
    says so, not the ~24 min its facts recorded when they were built; one part timed here scales the rest. On a
    cache without the model's statistics (a server's first fact) they are added, with their size: the page said
    "about 2 min" for a first fact that took 47 (issue 60)."""
    from editkit.lesson.pack import SHIPPED
    from editkit.lesson.timing import COST, estimate, estimate_fact, remember

    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))
    shipped = Pack.open(SHIPPED)
    s = compute.Settings.for_new_facts(shipped.manifest["settings"])
    first = estimate_fact(shipped, 1, s, others=0)
    one = first.seconds - first.statistics_seconds
    assert 60 < one < 300 and "benchmark" in first.how and "nothing was computed on this server yet" in first.how
    # ROME's layer 4 (a pass through 5 layers), MEMIT's 2-6 (7 layers), the sweep's others (all 18)
    assert [max(p["layers"]) + 1 for p in first.statistics] == [5, 7, 18]
    assert first.statistics_seconds == pytest.approx(COST["statistics_layer"] * 30)
    assert "(18 layers × 20,000 WikiText tokens in 3 passes, 302 MB in the cache)" in first.statistics_words()
    assert estimate(shipped, 1, s, others=0)[0] == pytest.approx(first.seconds)
    assert estimate(shipped, 2, s, others=0)[0] > first.seconds
    remember(shipped.model, s, "lens", 8.27, others=0)  # a cancelled build's first part under load: 16x the benchmark
    lens, how = estimate(shipped, 1, s, others=0)
    assert lens == pytest.approx(first.seconds + 8.27 - COST["lens"])
    assert "the others are from editkit's benchmark" in how
    remember(shipped.model, s, "trace", 2 * COST["trace"], others=0)  # half the benchmark's speed
    slow, how = estimate(shipped, 1, s, others=0)
    rate = (8.27 + 2 * COST["trace"]) / (COST["lens"] + COST["trace"])  # the trace covers enough to scale by
    assert slow - first.statistics_seconds == pytest.approx(8.27 + 2 * COST["trace"]
                                                            + rate * (one - COST["lens"] - COST["trace"]))
    assert "2 of the 10 kinds of part were computed here, the others are scaled from them" in how


def _cli_error(capsys, *argv) -> str:
    assert main(["lesson", "build", *argv]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("[")]  # progress
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize("records,expect", [
    ("not json at all", "not valid JSON"),
    ([{"prompt": "{} is in", "subject": "X", "target_true": "Paris"}],
     r"facts.json, record 1: the new target is missing"),
    ([FACT, {**FACT, "target_true": None}], r"record 2: the true target \(target_true\) is missing"),
    ([{**FACT, "prompt": "The tower is located in the city of", "case_id": 7}],
     r"record 1 \(case_id 7\): the prompt has no '\{\}' and the subject 'The Eiffel Tower' does not occur"),
    ([], "holds no records"),
], ids=["not-json", "no-target-new", "no-target-true", "subject-not-in-prompt", "empty"])
def test_bad_files_get_one_clear_message_naming_the_record(tmp_path, capsys, records, expect):
    path = tmp_path / "facts.json"
    path.write_text(records if isinstance(records, str) else json.dumps(records), encoding="utf-8")
    err = _cli_error(capsys, "--facts", str(path), "--out", str(tmp_path / "pack"), "--model", "no-such-model")
    assert re.search(expect, err), err  # the file is refused before the (unloadable) model is touched


def test_a_missing_file_and_a_fact_the_model_does_not_know(tmp_path, capsys):
    err = _cli_error(capsys, "--facts", str(tmp_path / "nope.json"), "--out", str(tmp_path / "p"))
    assert "no facts file" in err
    path = write_facts(tmp_path, [FACT, {**FACT, "subject": "The Louvre", "target_true": "Paris", "case_id": 3}])
    err = _cli_error(capsys, "--facts", str(path), "--out", str(tmp_path / "p"), "--model", MODEL)
    assert "record 2 (case_id 3): the model does not know this fact" in err
    assert "it predicts" in err and "not 'Paris'" in err
    assert not (tmp_path / "p" / "manifest.json").exists()


@pytest.mark.parametrize("n", ["0", "11"])
def test_retrace_samples_outside_the_facts_own_draws_are_refused(tmp_path, capsys, n):
    path = write_facts(tmp_path)
    err = _cli_error(capsys, "--facts", str(path), "--out", str(tmp_path / "p"), "--model", "no-such-model",
                     "--retrace-samples", n)
    assert "--retrace-samples must be between 1 and --samples (10)" in err


def test_the_cli_records_how_the_traces_were_computed(tmp_path, monkeypatch):
    """`lesson build`'s trace options reach the pack's settings (nothing computed here: the build is stubbed)."""
    import editkit.lesson.build as build_mod

    seen = []
    monkeypatch.setattr(build_mod, "build", lambda *a, **k: seen.append(a[4]) or {})
    path = write_facts(tmp_path)
    from editkit.cli import build_parser
    from editkit.commands.lesson import build as cli_build

    for argv, want in ((["--samples", "4"], ("bfloat16", "bfloat16", 4)),
                       ([], ("bfloat16", "bfloat16", 5)),
                       (["--exact-traces", "--exact-retraces", "--retrace-samples", "10"], ("float32", "float32", 10))):
        args = build_parser().parse_args(["lesson", "build", "--facts", str(path), "--out", str(tmp_path / "p"),
                                          *argv])
        cli_build(args)
        s = seen[-1]
        assert (s.trace_precision, s.retrace_precision, s.retrace_samples) == want, argv


def test_show_and_open_errors(tmp_path, pack, capsys):
    assert main(["lesson", "show", str(pack.folder), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == MODEL and out["facts"][0]["missing"] == []
    with pytest.raises(EditkitError, match="not a lesson pack"):
        Pack.open(tmp_path)
    (tmp_path / "notes.txt").write_text("a folder of other files")
    with pytest.raises(EditkitError, match="not a lesson pack; give an empty"):
        build(write_facts(tmp_path), tmp_path, MODEL)


def test_the_build_clock_adds_to_a_parts_own_time_left_instead_of_contradicting_it():
    """Adding a fact on a fresh server read "statistics ...: about 8.9 min left (about 3 min left)": the first-use
    statistics give their own estimate, which the build's contradicted. Where a part says its own time left, the
    build says what the parts after it take; one vocabulary (time_left)."""
    from editkit.core.progress import eta, gives_time, time_left
    from editkit.lesson.building import Clock

    said = []
    clock = Clock(lambda f, m: said.append(m), [24.0, 36.0], ["[1/2] traces", "[2/2] sweep"])
    step, finish = clock.unit(0)
    step(0.5, "tracing hidden")
    assert said[-1] == "[1/2] traces: tracing hidden (about 60 s left)"  # no progress of its own yet: 24 + 36 s
    step(0.5, "statistics for layer 3: 10/20 tokens, " + eta(30.0, 10, 20))
    assert said[-1].endswith("about 30 s left (then about 36 s for the other parts)")
    finish(False)
    step, _ = clock.unit(1)
    step(0.1, "statistics: " + eta(10.0, 1, 4))
    assert said[-1].endswith("(the last part)")
    assert gives_time(time_left(300)) and time_left(300) == "about 5 min left" and not gives_time("step 3/10")


def test_the_countdown_moves_with_the_clock_and_the_parts_to_come_follow_the_parts_done(monkeypatch):
    """The add-a-fact countdown sat at "about 115 s left" for five minutes and then jumped to "about 20.6 min"
    (issue 60): it moved only with a part's own progress. Now the part computing counts down from its expected
    seconds as the wall clock runs, and the parts to come are scaled by how much longer the finished ones took than
    expected (weighed against PRIOR seconds, so one short part does not swing it)."""
    from editkit.lesson import building
    from editkit.lesson.building import PRIOR, Clock

    now = [1000.0]
    monkeypatch.setattr(building.time, "time", lambda: now[0])
    clock = Clock(lambda f, m: None, [10.0, 20.0], ["a", "b"])
    step, finish = clock.unit(0)
    assert clock.left() == pytest.approx(30)
    now[0] = 1005.0  # no progress reported: the countdown moves anyway
    assert clock.left() == pytest.approx(25)
    now[0] = 1012.0  # longer than expected: the part is "about to finish", never a negative or frozen time
    assert clock.left() == pytest.approx(1 + 20)
    now[0] = 1020.0
    finish(True)  # 20 s against 10 expected
    step, _ = clock.unit(1)
    ratio = (20 + PRIOR) / (10 + PRIOR)
    assert clock.left() == pytest.approx(20 * ratio) and clock.ends()[0] == 1020.0
    now[0] = 1026.0
    step(0.5)  # half of it in 6 s: its own progress now says 6 s more
    assert clock.left() == pytest.approx(6)
