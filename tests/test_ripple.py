"""Ripple effects: the derivation of implied facts from the model's own answers, the in-context reference, the
one-edit view and the evaluation over many edits, the co-editing method."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from editkit.cli import main
from editkit.core.errors import EditkitError
from editkit.data import implications
from editkit.data.implications import (
    Derivation,
    ImpliedFact,
    derive,
    match_answer,
    rules_for,
    table,
    user_fact,
)
from editkit.editing.defaults import load_hparams
from editkit.editing.requests import EditRequest
from editkit.evaluation import ripple_eval
from editkit.evaluation.ripple import (
    IN_CONTEXT,
    conclusion,
    context_prefix,
    method_ripple,
    ripple,
    share_table,
    written,
)
from editkit.model.scoring import TargetScore

EIFFEL = EditRequest("{} is located in the city of", "Eiffel Tower", "Rome", "Paris",
                     neighborhood_prompts=["The Louvre is located in the city of"], relation="P131")
FAST = {"v_num_grad_steps": 4}


class _Runner:
    """A model that answers clozes from a table (the fixture's knowledge)."""

    def __init__(self, said):
        self.said = said

    def complete(self, prompts, decoding):
        return [self.said.get(p, " the same thing") for p in prompts]


class _LM:
    def __init__(self, said):
        self.runner = _Runner(said)


def _scores(said, probs):
    """score_targets over the fixture: an answer is the top-1 where the cloze's continuation starts with it."""
    def score(lm, prompts, targets, batch_size=16):
        out = []
        for p, t in zip(prompts, targets):
            hit = said.get(p, "").lstrip().startswith(t.strip())
            prob = probs.get((p, t.strip()), 0.6 if hit else 0.01)
            out.append(TargetScore(float(torch.tensor(prob).log()), 1, [0.0], [hit], [0]))
        return out
    return score


FIXTURE = {
    "Eiffel Tower is located in the city of": " Paris, France.",
    "Rome is located in the country of": " Italy, and is",
    "Paris is located in the country of": " France, and",
    "Eiffel Tower is located in the country of": " France. It is",
    "Tour Eiffel is located in the city of": " Paris, the",
    "the Eiffel tower is located in the city of": " a small town",
    "Eiffel Tower is located in the continent of": " Europe, and",
}


def test_rules_are_data_with_a_relation_pair_and_one_slot():
    rels = table()["relations"]
    assert all(r["probe"].count("{}") == 1 for r in rels.values())
    for rule in table()["rules"]:
        assert len(rule["pair"]) == 2 and all(p in rels for p in rule["pair"]), rule
        assert rule["kind"] in ("compose", "implies", "inverse") and rule["why"]
        assert all(p.count("{}") == 1 for p in rule["prompts"] + ([rule["hop"]] if "hop" in rule else []))
        assert len(rule["prompts"]) >= 2  # a test phrasing and an edit phrasing
        assert all(m.count("{}") == 1 and m not in rule["prompts"] for m in rule.get("more_edit_prompts", []))
    assert [r["pair"] for r in rules_for("P131")] == [["P131", "P17"]]


def test_a_known_rule_gives_the_expected_prompt_and_answer(monkeypatch):
    monkeypatch.setattr(implications, "score_targets", _scores(FIXTURE, {}))
    d = derive(_LM(FIXTURE), EIFFEL)
    logical = [f for f in d.facts if f.criterion == "logical"]
    assert [(f.prompt, f.answer, f.move, f.rule) for f in logical] == [
        ("Eiffel Tower is located in the country of", " Italy", True, "P131>P17")]
    assert logical[0].evidence == "Rome is located in the country of" and logical[0].evidence_p == pytest.approx(0.6)
    assert logical[0].edit_prompt == "Eiffel Tower can be found in the country of"
    pres = [f for f in d.facts if f.criterion == "preservation"]
    assert [(f.prompt, f.answer, f.move) for f in pres] == [("Paris is located in the country of", " France", False)]
    alias = [f for f in d.facts if f.criterion == "aliasing"]
    assert [(f.prompt, f.answer) for f in alias] == [("Tour Eiffel is located in the city of", " Rome")]
    reasons = {x.prompt: x.reason for x in d.dropped}
    assert "not the same entity" in reasons["the Eiffel tower is located in the city of"]


def test_asking_for_the_logical_facts_only_gives_the_same_facts_with_fewer_clozes(monkeypatch):
    """Co-edit writes only the logical facts: their derivation asks no alias or specificity cloze, and each
    criterion's facts are chosen apart from the others', so they are the full derivation's."""
    monkeypatch.setattr(implications, "score_targets", _scores(FIXTURE, {}))
    asked = []
    lm = _LM(FIXTURE)
    complete = lm.runner.complete
    lm.runner.complete = lambda prompts, decoding: asked.append(list(prompts)) or complete(prompts, decoding)
    full = implications.derive_many(lm, [EIFFEL])[0]
    only = implications.derive_many(lm, [EIFFEL], criteria=("logical",))[0]
    assert only.facts == [f for f in full.facts if f.criterion == "logical"] and only.facts
    assert len(asked[1]) < len(asked[0]) and "Tour Eiffel is located in the city of" not in asked[1]


def test_a_fact_the_model_does_not_know_is_dropped_with_the_reason(monkeypatch):
    said = {**FIXTURE, "Rome is located in the country of": " the same name"}
    monkeypatch.setattr(implications, "score_targets", _scores(said, {}))
    d = derive(_LM(said), EIFFEL)
    assert not [f for f in d.facts if f.criterion == "logical"]
    reason = {x.prompt: x.reason for x in d.dropped}["Eiffel Tower is located in the country of"]
    assert "does not know the country of Rome" in reason and "the same name" in reason


def test_a_guess_below_the_floor_is_not_knowledge(monkeypatch):
    probs = {("Rome is located in the country of", "Italy"): 0.05}
    monkeypatch.setattr(implications, "score_targets", _scores(FIXTURE, probs))
    d = derive(_LM(FIXTURE), EIFFEL)
    assert not [f for f in d.facts if f.criterion == "logical"]
    assert "P >= 0.1" in {x.prompt: x.reason for x in d.dropped}["Eiffel Tower is located in the country of"]


def test_no_relation_says_so():
    d = derive(_LM({}), EditRequest("My favourite {} is", "colour", "blue"))
    assert d.facts == [] and d.message().startswith("no implied fact the model knows")


def test_match_answer_reads_whole_words_and_the_article():
    assert match_answer(" Italy, and", "P17") == "Italy"
    assert match_answer(" the United Kingdom. It", "P17") == "the United Kingdom"
    assert match_answer(" Italyx", "P17") is None


def test_a_relation_knows_the_answers_of_every_relation_of_its_kind():
    """The table's extra answers are listed once, on one relation of a kind (P17, country); every relation whose
    answers are countries (citizenship, country of origin) knows them too: "the United States of" was dropped as
    "not a known citizenship"."""
    countries = set(table()["relations"]["P17"]["answers"])
    for rel in ("P27", "P495"):
        assert countries <= set(implications.vocabulary(rel))
    assert match_answer(" the United States of", "P27") == "the United States"
    assert "United States" not in implications.vocabulary("P103")  # a language is not a country


def test_in_context_reference_changes_no_weight(tiny_by_name):
    lm = tiny_by_name("tiny-gemma3")
    before = {n: p.detach().clone() for n, p in lm.model.named_parameters()}
    fact = user_fact("The Eiffel Tower is in the country of", "Italy", True)
    m = method_ripple(lm, IN_CONTEXT, EIFFEL, [fact])
    assert m.name == IN_CONTEXT and len(m.outcomes) == 1 and m.seconds >= 0
    for n, p in lm.model.named_parameters():
        assert torch.equal(p, before[n]), n
    assert context_prefix(EIFFEL) == "Imagine that Eiffel Tower is located in the city of Rome.\n"


def test_ripple_one_edit_and_conclusion(tiny_by_name):
    lm = tiny_by_name("tiny-gemma3")
    fact = user_fact("The Eiffel Tower is in the country of", "Italy", True)
    got = ripple(lm, EIFFEL, ["rome"], hparams={"rome": FAST}, extra=[fact])
    assert [m.name for m in got.methods] == ["rome", IN_CONTEXT]
    assert got.facts[-1].criterion == "user"
    assert all(len(m.outcomes) == len(got.facts) for m in got.methods)
    assert got.conclusion.endswith(".")
    back = type(got).from_json(json.loads(json.dumps(got.to_json())))  # the JSON edge loses nothing
    assert back.to_json() == got.to_json()
    table = got.to_frame()
    assert len(table) == 2 * len(got.facts) and set(table["verdict"]) <= {"moved", "stayed", "failed"}
    # a column's label is wrapped onto lines (<br>) that fit its column
    assert [x.replace("<br>", " ") for x in got.figure().data[0].x] == ["before", "ROME", "In-context reference"]


def test_no_fact_gives_a_message_not_an_empty_chart(tiny_by_name):
    from editkit.figures.ripple import ripple_figure

    lm = tiny_by_name("tiny-gemma3")
    got = ripple(lm, EditRequest("My favourite {} is", "colour", "blue"), ["rome"])
    out = got.to_json()
    assert out["facts"] == [] and out["methods"] == {} and got.figure() is None
    assert "no implied fact the model knows" in got.message and ripple_figure(out) is None
    for shown in (got._repr_html_(), got._repr_mimebundle_()["text/html"]):  # a notebook shows the message
        assert "no implied fact the model knows" in shown and "<table" not in shown  # (it raised AttributeError)


def test_conclusion_within_noise():
    facts = [{"move": True}, {"move": True}, {"move": False}]
    def m(label, verdicts):
        return {"label": label, "outcomes": [{"verdict": v} for v in verdicts]}
    out = {"facts": facts, "methods": {"a": m("A", ["moved", "moved", "stayed"]),
                                       "b": m("B", ["moved", "failed", "stayed"])}}
    assert conclusion(out).startswith("A propagates best") and "within noise" in conclusion(out)
    out["methods"]["b"] = m("B", ["failed", "failed", "failed"])
    assert "within noise" not in conclusion(out)


def test_conclusion_names_every_method_tied_at_the_top_and_no_empty_clause():
    """Three methods tied at the top are all named (not one called best, one within noise, one left out), and a
    criterion with no fact gets no "0 of 0" clause."""
    def m(label, verdicts):
        return {"label": label, "outcomes": [{"verdict": v} for v in verdicts]}
    out = {"facts": [{"move": True}, {"move": True}],
           "methods": {"r": m("ROME", ["moved", "moved"]), "me": m("MEMIT", ["moved", "moved"]),
                       "c": m("Co-edit", ["moved", "moved"]), "i": m("In-context", ["moved", "failed"])}}
    text = conclusion(out)
    assert text.startswith("ROME, MEMIT and Co-edit tie for best here: 2 of 2 facts that should move moved;")
    assert "In-context is within noise of them (1 moved:" in text and "0 of 0" not in text


def test_share_table_keeps_relation_and_neighbourhood_specificity_apart():
    """A row's own "specificity" (its neighbourhood prompts, before and after) is not the relation-specificity
    criterion of the same name: an edit whose other relation failed while every neighbour kept its answer scores 0
    on the one and 100 on the other."""
    facts = {"e": [{"criterion": "logical", "move": True}, {"criterion": "specificity", "move": False}]}
    rows = {"memit": [{"key": "e", "outcomes": [{"verdict": "moved"}, {"verdict": "failed"}],
                       "efficacy": [0.0, 1.0], "specificity": [1.0, 0.9]}]}
    table = share_table(rows, facts)["memit"]
    assert table["specificity"]["mean"] == 0.0 and table["logical"]["mean"] == 100.0
    assert table["neighbourhood"]["mean"] == 90.0 and round(table["neighbourhood_change"]["mean"], 6) == -10.0
    assert table["efficacy"]["mean"] == 100.0


def test_cli_ripple_on_a_tiny_model(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**EIFFEL.to_dict(), "case_id": 1}))
    assert main(["ripple", "--model", "tiny-gemma3", "--requests", str(path), "--methods", "rome",
                 "--fact", "The Eiffel Tower is in the country of|Italy|move"]) == 0
    text = capsys.readouterr().out
    assert "P131" in text and "user" in text and "In-context reference" in text
    assert main(["ripple", "--model", "tiny-gemma3", "--requests", str(path), "--fact", "no answer"]) == 2
    capsys.readouterr()
    assert main(["ripple", "--model", "tiny-gemma3", "--requests", str(path), "--relation", "P999"]) == 2
    assert "'P999' is not in editkit's rule table; it knows P17, P19" in capsys.readouterr().err  # not "unknown"
    assert main(["ripple", "--model", "tiny-gemma3", "--requests", str(path), "--methods", "memit"]) == 0
    text = capsys.readouterr().out  # the random model knows none: the message once, not again as a conclusion
    assert text.count("no implied fact the model knows") == 1, text


def _fake_derive(lm, requests, relations=None, cap=4, progress=None, criteria=None):
    """A derivation for any request: the tiny random model knows nothing, so the facts are given."""
    out = []
    for r in requests:
        out.append(Derivation(r.relation, [
            ImpliedFact("logical", f"{r.subject} is in the country of", " Italy", True, "P131>P17",
                        edit_prompt=f"{r.subject} can be found in the country of", subject=r.subject, p_before=0.1),
            ImpliedFact("preservation", "Paris is in the country of", " France", False, "P131>P17", p_before=0.5)]))
    return out


def test_evaluate_ripple_on_a_tiny_model_resumes(tiny_by_name, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ripple_eval, "derive_many", _fake_derive)
    monkeypatch.setattr(ripple_eval, "_knows", lambda lm, rs: [True] * len(rs))
    lm = tiny_by_name("tiny-gemma3")
    spec = ripple_eval.RippleSpec(n=2)
    out = ripple_eval.evaluate_ripple(lm, ["memit", IN_CONTEXT], spec, {"memit": FAST}, out_dir=tmp_path)
    assert out.n == 2 and out.facts["logical"] == 2
    cell = out.table["memit"]["logical"]
    assert 0 <= cell["mean"] <= 100 and cell["edits"] == 2
    assert "diff" in out.table[IN_CONTEXT]["logical"]  # paired with MEMIT on the same edits
    lines = {m: sum(1 for _ in open(p)) for m, p in out.files.items()}
    again = ripple_eval.evaluate_ripple(lm, ["memit", IN_CONTEXT], spec, {"memit": FAST}, out_dir=tmp_path)
    assert again.table == out.table
    assert {m: sum(1 for _ in open(p)) for m, p in again.files.items()} == lines  # nothing recomputed
    assert type(out).from_json(out.to_json()).to_json() == out.to_json()
    assert len(out.figure().data) == 2 and set(out.to_frame()["method"]) == {"memit", IN_CONTEXT}
    rc = main(["evaluate", "--ripple", "--model", "tiny-gemma3", "--methods", "memit", "--n", "2", "--out",
               str(tmp_path), "--hparams-json", json.dumps({"memit": FAST})])
    assert rc == 0 and "logical / compositional" in capsys.readouterr().out


def test_an_interrupted_ripple_run_resumes_to_the_same_table(tiny_by_name, tmp_path, monkeypatch):
    """Rows are appended edit by edit, the methods interleaved; a run killed mid-way (and a line cut short) resumes
    from its files to the table of one uninterrupted run; the rows so far give a partial table."""
    monkeypatch.setattr(ripple_eval, "derive_many", _fake_derive)
    monkeypatch.setattr(ripple_eval, "_knows", lambda lm, rs: [True] * len(rs))
    lm = tiny_by_name("tiny-gemma3")
    spec = ripple_eval.RippleSpec(n=3)
    methods = ["memit", IN_CONTEXT]
    whole = ripple_eval.evaluate_ripple(lm, methods, spec, {"memit": FAST}, out_dir=tmp_path / "whole")
    assert whole.done == {"memit": 3, IN_CONTEXT: 3} and not whole.partial

    real, calls = ripple_eval.ripple_batch, []

    def dies_on_the_fourth(*args):
        calls.append(args[1])  # (lm, method, ...)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(ripple_eval, "ripple_batch", dies_on_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        ripple_eval.evaluate_ripple(lm, methods, spec, {"memit": FAST}, out_dir=tmp_path / "cut")
    assert calls == ["memit", IN_CONTEXT, "memit", IN_CONTEXT]  # edit by edit, the methods interleaved
    files = sorted((tmp_path / "cut").glob("ripple-memit-*.jsonl"))
    assert len(files) == 1
    lines = files[0].read_text().splitlines()
    assert json.loads(lines[0])["header"]["method"] == "memit" and len(lines) == 1 + 2  # header + 2 edits
    with files[0].open("a") as f:
        f.write('{"key": "cut sh')  # killed while writing a line
    part = ripple_eval.evaluate_ripple(lm, methods, spec, {"memit": FAST}, out_dir=tmp_path / "cut", run=False)
    assert part.partial and part.done == {"memit": 2, IN_CONTEXT: 1} and part.n == 3
    assert part.table["memit"]["logical"]["edits"] == 2
    monkeypatch.setattr(ripple_eval, "ripple_batch", real)
    resumed = ripple_eval.evaluate_ripple(lm, methods, spec, {"memit": FAST}, out_dir=tmp_path / "cut")
    assert resumed.table == whole.table and resumed.done == whole.done
    assert len(files[0].read_text().splitlines()) == 1 + 2 + 1 + 1  # the cut line stays alone, the third edit after it


def test_a_rephrased_rule_measures_again_only_the_edits_whose_facts_changed(tiny_by_name, tmp_path, monkeypatch):
    """A row stands for the facts it measured: after the rule table changes, the selection is screened again and
    only the records whose facts differ are edited again (not those whose probabilities before the edit differ by
    float rounding); the others' rows are kept, and none is read against facts it did not measure."""
    monkeypatch.setattr(ripple_eval, "derive_many", _fake_derive)
    monkeypatch.setattr(ripple_eval, "_knows", lambda lm, rs: [True] * len(rs))
    lm = tiny_by_name("tiny-gemma3")
    spec, methods = ripple_eval.RippleSpec(n=2), ["memit", IN_CONTEXT]
    first = ripple_eval.evaluate_ripple(lm, methods, spec, {"memit": FAST}, out_dir=tmp_path)
    keys = [k for k in ripple_eval.read_rows(Path(first.files["memit"]))]
    assert len(keys) == 2 and all(r["facts"] for r in ripple_eval.read_rows(Path(first.files["memit"])).values())

    def rephrased(lm, requests, relations=None, cap=4, progress=None, criteria=None):
        out = _fake_derive(lm, requests, relations, cap, progress, criteria)
        for r, d in zip(requests, out):
            for f in d.facts:  # a screening in other batches: the same facts, probabilities off by float rounding
                f.p_before += 1e-7
            if str(r.case_id) == keys[1].split(":")[-1]:
                d.facts[0].prompt = f"{r.subject} lies in the country of"
        return out

    real, edited = ripple_eval.ripple_batch, []
    monkeypatch.setattr(ripple_eval, "ripple_batch", lambda *a: edited.append((a[1], len(a[2]))) or real(*a))
    monkeypatch.setattr(ripple_eval, "derive_many", rephrased)
    monkeypatch.setattr(ripple_eval, "_deciding", lambda: {"rules": ["rephrased"]})
    again = ripple_eval.evaluate_ripple(lm, methods, spec, {"memit": FAST}, out_dir=tmp_path)
    assert sorted(edited) == [(IN_CONTEXT, 1), ("memit", 1)]  # the changed record only, once per method
    assert len(list(tmp_path.glob("ripple-select-*.jsonl"))) == 2 and again.done == first.done
    rows = ripple_eval.read_rows(Path(again.files["memit"]))
    assert rows[keys[0]] == ripple_eval.read_rows(Path(first.files["memit"]))[keys[0]]  # kept as it was


def test_a_checkpoint_with_other_settings_is_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    ripple_eval.header_row(path, {"method": "memit", "hp": {"lr": 1}})
    ripple_eval.header_row(path, {"method": "memit", "hp": {"lr": 1}})  # the same settings: resumed
    assert path.read_text().count("header") == 1
    with pytest.raises(EditkitError, match="other settings"):
        ripple_eval.header_row(path, {"method": "memit", "hp": {"lr": 2}})


def test_the_checkpoint_lives_in_the_repository(tiny_by_name):
    from editkit.core.paths import ROOT

    lm = tiny_by_name("tiny-gemma3")
    if (ROOT / ".git").exists():
        assert ripple_eval.checkpoint_dir(lm) == ROOT / "assets" / "results" / "ripple" / lm.name


def test_coedit_writes_the_implications_in_the_edit_phrasing(tiny_by_name, monkeypatch):
    from editkit.editing.methods import get
    from editkit.editing.run import run_edit

    monkeypatch.setattr(implications, "derive_many", _fake_derive)
    lm = tiny_by_name("tiny-gemma3")
    assert get("coedit").label.startswith("Co-edit")
    result = run_edit(lm, "coedit", [EIFFEL], FAST)
    assert result.method == "coedit"
    assert result.details["implied"] == [{"prompt": "Eiffel Tower can be found in the country of",
                                          "target": " Italy"}]
    assert len(result.requests) == 2 and result.delta
    plain = run_edit(lm, "coedit", [EIFFEL], {**FAST, "max_implied": 0})
    assert plain.details["implied"] == []


def test_grade_ripple_counts_the_facts_classified_right():
    from editkit.lesson.grading import grade_ripple

    out = {"facts": [{"prompt": "a", "answer": " Italy", "move": True, "p_before": 0.01, "criterion": "logical"},
                     {"prompt": "b", "answer": " France", "move": False, "p_before": 0.8,
                      "criterion": "preservation"}],
           "methods": {"rome": {"outcomes": [{"verdict": "failed", "p_after": 0.02},
                                             {"verdict": "stayed", "p_after": 0.8}]}}}
    assert grade_ripple(out, ["b"]).verdict == "right"
    assert grade_ripple(out, ["a", "b"]).score == 0.5 and grade_ripple(out, ["a", "b"]).verdict == "wrong"
    assert "no implied fact" in grade_ripple({"facts": [], "methods": {}, "message": "no implied fact the model "
                                                                                     "knows"}, []).feedback


@pytest.mark.full  # starts a local Ray cluster
def test_evaluate_ripple_on_ray_equals_in_process(tiny_by_name, tmp_path, monkeypatch, ray_local):
    monkeypatch.setattr(ripple_eval, "derive_many", _fake_derive)
    monkeypatch.setattr(ripple_eval, "_knows", lambda lm, rs: [True] * len(rs))
    lm = tiny_by_name("tiny-gemma3")
    spec = ripple_eval.RippleSpec(n=2)
    here = ripple_eval.evaluate_ripple(lm, ["memit", IN_CONTEXT], spec, {"memit": FAST}, out_dir=tmp_path / "a")
    there = ripple_eval.evaluate_ripple(lm, ["memit", IN_CONTEXT], spec, {"memit": FAST}, out_dir=tmp_path / "b",
                                        backend=ray_local, batch=1)
    assert there.table == here.table


@pytest.mark.quick  # one derivation: about twenty greedy clozes
def test_the_embedded_model_gives_the_eiffel_towers_new_country(gemma):
    """Gemma 3 270M knows Rome is in Italy and Paris in France: the rule P131>P17 turns the edit into 'the Eiffel
    Tower is located in the country of' -> Italy (should move) and keeps 'Paris ...' -> France (should stay)."""
    d = derive(gemma, EIFFEL)
    logical = {f.prompt: f for f in d.facts if f.criterion == "logical"}
    fact = logical["Eiffel Tower is located in the country of"]
    assert fact.answer == " Italy" and fact.evidence_p > 0.5 and fact.p_before < 0.1
    assert [(f.prompt, f.answer) for f in d.facts if f.criterion == "preservation"] == [
        ("Paris is located in the country of", " France")]
    assert any(f.criterion == "aliasing" and f.prompt.startswith("Tour Eiffel") for f in d.facts)


@pytest.mark.full
def test_evaluate_ripple_on_the_embedded_model(gemma, tmp_path):
    out = ripple_eval.evaluate_ripple(gemma, ["memit", IN_CONTEXT], ripple_eval.RippleSpec(n=1), out_dir=tmp_path)
    assert out.n == 1 and out.facts["logical"] >= 1
    assert set(out.table) == {"memit", IN_CONTEXT} and "logical" in out.table["memit"]


def test_coedit_joint_targets_tie_an_implication_to_its_requests_subject():
    from editkit.editing.methods.coedit import joint_tie
    from editkit.editing.requests import EditRequest

    implied = EditRequest("{} can be found in the country of", "Eiffel Tower", " Italy")
    about_rome = EditRequest("The capital of {} is", "Italy", " Rome")  # an inverse rule's fact, about o*
    assert joint_tie([EIFFEL], [implied, about_rome], [0, 0]) == (0, 0, 2)
    assert joint_tie([EIFFEL], [about_rome], [0]) is None  # nothing shared: the plain batch
    # two implications about the same other subject: their own deltas, or with `other` one shared delta
    also_rome = EditRequest("{} lies in the country of", "Italy", " Rome")
    assert joint_tie([EIFFEL], [implied, about_rome, also_rome], [0, 0, 0]) == (0, 0, 2, 3)
    assert joint_tie([EIFFEL], [implied, about_rome, also_rome], [0, 0, 0], other=True) == (0, 0, 2, 2)
    assert joint_tie([EIFFEL, EIFFEL], [about_rome, also_rome], [0, 1], other=True) is None  # per request


def test_coedit_joint_targets_write_one_delta_for_a_fact_and_its_implication(tiny_by_name, monkeypatch):
    from editkit.editing.run import run_edit

    monkeypatch.setattr(implications, "derive_many", _fake_derive)
    lm = tiny_by_name("tiny-gemma3")
    joint = run_edit(lm, "coedit", [EIFFEL], {**FAST, "joint_targets": True})
    apart = run_edit(lm, "coedit", [EIFFEL], {**FAST, "joint_targets": False})
    assert joint.hparams.joint_targets and not apart.hparams.joint_targets
    steps = [len(r.losses) for r in joint.per_request]
    assert steps[0] == steps[1]  # one delta: the pair stops together
    assert any(float((joint.delta[k] - apart.delta[k]).abs().max()) > 1e-6 for k in joint.delta)


def test_coedit_writes_each_implication_in_its_rules_phrasings_never_the_tests(tiny_by_name, monkeypatch):
    from editkit.editing.run import run_edit

    monkeypatch.setattr(implications, "derive_many", _fake_derive)
    lm = tiny_by_name("tiny-gemma3")
    result = run_edit(lm, "coedit", [EIFFEL], {**FAST, "implied_phrasings": 3})
    rule = next(r for r in table()["rules"] if r["pair"] == ["P131", "P17"])
    written = [x["prompt"] for x in result.details["implied"]]
    assert written == ["Eiffel Tower can be found in the country of"] + [
        p.format("Eiffel Tower") for p in rule["more_edit_prompts"][:2]]
    assert rule["prompts"][0].format("Eiffel Tower") not in written  # the test's phrasing is never written
    assert len({len(r.losses) for r in result.per_request}) == 1  # one subject: one delta, stopped together


def test_keep_facts_ask_the_subjects_other_relations_in_their_keep_phrasing_never_the_probe(monkeypatch):
    """What co-edit's max_kept writes: s's other relations (here the continent of a place) at the model's own
    answer, in the relation's keep phrasing; a test's probe is never asked, an answer the model does not know is
    dropped with the reason."""
    keep = table()["relations"]["P30"]["keep"].format("Eiffel Tower")
    said = {**FIXTURE, keep: " Europe, the"}
    monkeypatch.setattr(implications, "score_targets", _scores(said, {}))
    asked = []
    lm = _LM(said)
    complete = lm.runner.complete
    lm.runner.complete = lambda prompts, decoding: asked.append(list(prompts)) or complete(prompts, decoding)
    d = implications.keep_facts(lm, [EIFFEL], 4)[0]
    assert [(f.prompt, f.answer, f.move, f.rule) for f in d.facts] == [(keep, " Europe", False, "P30")]
    probes = {d["probe"].format("Eiffel Tower") for d in table()["relations"].values()}
    assert asked and not probes & set(asked[0])
    unknown = implications.keep_facts(_LM(FIXTURE), [EIFFEL], 4)[0]
    assert not unknown.facts and "not a known continent" in {x.prompt: x.reason for x in unknown.dropped}[keep]
    assert implications.keep_facts(lm, [EIFFEL], 0)[0].facts == []


def test_coedit_keeps_the_subjects_other_relations_with_the_same_delta(tiny_by_name, monkeypatch):
    from editkit.editing.run import run_edit

    monkeypatch.setattr(implications, "derive_many", _fake_derive)
    kept = ImpliedFact("specificity", "Eiffel Tower lies in the continent of", " Europe", False, "P30",
                       subject="Eiffel Tower")
    monkeypatch.setattr(implications, "keep_facts",
                        lambda lm, rs, cap: [Derivation(r.relation, [kept] if cap else []) for r in rs])
    lm = tiny_by_name("tiny-gemma3")
    result = run_edit(lm, "coedit", [EIFFEL], {**FAST, "max_kept": 1})
    assert result.details["kept"] == [{"prompt": "Eiffel Tower lies in the continent of", "target": " Europe"}]
    assert len(result.requests) == 3 and len({len(r.losses) for r in result.per_request}) == 1  # one delta
    plain = run_edit(lm, "coedit", [EIFFEL], FAST)
    assert plain.details["kept"] == [] and len(plain.requests) == 2
    light = run_edit(lm, "coedit", [EIFFEL], {**FAST, "max_kept": 1, "keep_weight": 0.25})
    assert any(float((result.delta[k] - light.delta[k]).abs().max()) > 1e-6 for k in result.delta)
    assert any(float((result.delta[k] - plain.delta[k]).abs().max()) > 1e-6 for k in result.delta)
    assert written(result) == [  # what the ripple view lists as written besides the request
        {"prompt": "Eiffel Tower can be found in the country of", "target": " Italy", "why": "implied"},
        {"prompt": "Eiffel Tower lies in the continent of", "target": " Europe", "why": "kept"}]
    assert written(plain) == written(result)[:1]


def test_coedit_kept_relations_hold_the_shared_deltas_stop_only_when_asked(tiny_by_name, monkeypatch):
    """kept_hold_stop False: a kept relation pulls on the shared delta but does not keep it running (joint.Joint
    holds: tests/test_targets.py checks what that does); True: every member holds the stop, as before."""
    from editkit.editing.methods import coedit

    monkeypatch.setattr(implications, "derive_many", _fake_derive)
    kept = ImpliedFact("specificity", "Eiffel Tower lies in the continent of", " Asia", False, "P30",
                       subject="Eiffel Tower")
    monkeypatch.setattr(implications, "keep_facts",
                        lambda lm, rs, cap: [Derivation(r.relation, [kept] if cap else []) for r in rs])
    seen = []
    monkeypatch.setattr(coedit, "apply_memit", lambda *a, joint=None, **k: seen.append(joint) or SimpleNamespace(
        details={}, diagnostics=[]))
    lm = tiny_by_name("tiny-gemma3")
    for hold in (True, False):
        coedit.apply_coedit(lm, [EIFFEL], load_hparams("coedit", lm, {**FAST, "max_kept": 1, "kept_hold_stop": hold,
                                                                         "keep_weight": 0.25}))
    assert seen[0] == coedit.Joint((0, 0, 0), (1.0, 1.0, 0.25), None)
    assert seen[1] == coedit.Joint((0, 0, 0), (1.0, 1.0, 0.25), (True, True, False))


def test_more_edit_prompts_do_not_change_a_selection():
    """The phrasings only a propagation method writes (a rule's more_edit_prompts, a relation's keep) are not
    part of what a ripple selection depends on, so the committed selections and their rows stay valid when
    phrasings are added."""
    rules = ripple_eval._deciding()["rules"]
    assert rules and all("more_edit_prompts" not in r for r in rules)
    assert all(r.get("more_edit_prompts") for r in table()["rules"])
    assert not any("keep" in d for d in ripple_eval._deciding()["relations"].values())
    assert any("keep" in d for d in table()["relations"].values())


def test_a_results_file_named_before_a_field_existed_stays_valid_at_its_neutral_value(tiny_by_name):
    """Settings recorded for a results file leave out a field added later when it has the value that means the
    behaviour before it (NEUTRAL), and keep it otherwise, so old rows are resumed only for the same behaviour."""
    from editkit.editing.defaults import load_hparams

    lm = tiny_by_name("tiny-gemma3")
    hp = load_hparams("coedit", lm, {"joint_targets": False, "implied_phrasings": 1})
    assert "implied_phrasings" not in hp.recorded() and "joint_targets" not in hp.recorded()
    neutral = (*type(hp).NEUTRAL, "source")  # co-edit's own and MEMIT's (update_norm_lambda, add_prev_edits, ...)
    assert {"joint_targets", "implied_phrasings", "max_kept", "joint_other", "update_norm_lambda"} <= set(neutral)
    assert hp.recorded() == {k: v for k, v in hp.to_dict().items() if k not in neutral}
    other = hp.replace(joint_targets=True, implied_phrasings=3, max_kept=2)
    assert other.recorded()["joint_targets"] is True and other.recorded()["implied_phrasings"] == 3
    assert other.recorded()["max_kept"] == 2
    assert "keep_weight" not in hp.replace(keep_weight=0.25).recorded()  # nothing kept: the weight means nothing
    assert other.replace(keep_weight=0.25).recorded()["keep_weight"] == 0.25
    assert "kept_hold_stop" not in hp.replace(kept_hold_stop=False).recorded()
    assert other.replace(kept_hold_stop=False).recorded()["kept_hold_stop"] is False


def test_a_reworded_source_note_names_the_same_results_file(tmp_path, tiny_by_name):
    """A results file is named and headed by what the settings do: the hyperparameters' `source` note is left
    out, and a header written with an older note is accepted for the same behaviour, any other change refused."""
    from editkit.editing.defaults import load_hparams

    hp = load_hparams("coedit", tiny_by_name("tiny-gemma3"), {})
    assert "source" not in hp.recorded() and hp.recorded() == hp.replace(source="reworded").recorded()
    path = tmp_path / "rows.jsonl"
    settings = {"format": 1, "hp": hp.recorded()}
    path.write_text(json.dumps({"header": {"format": 1, "hp": {**hp.recorded(), "source": "old note"}}}) + "\n")
    ripple_eval.header_row(path, settings)
    with pytest.raises(EditkitError, match="other settings"):
        ripple_eval.header_row(path, {"format": 1, "hp": {**hp.recorded(), "max_implied": 1}})
