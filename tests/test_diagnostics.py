"""An edit that fails its own rewrite says so with its likely reason, and co-edit says when it wrote no implied fact
and which request field would give it one: typed diagnostics on EditResult (editing/result.py), read by the API's
report, the CLI and the Edit & compare page without naming any method."""
from editkit.editing.requests import EditRequest
from editkit.editing.result import Diagnostic, EditResult, RequestReport, likely_reason
from editkit.evaluation.report import edit_report

REQUEST = {"prompt": "{} is located in the city of", "subject": "Eiffel Tower", "target_new": "Rome",
           "target_true": "Paris"}


def _result(method: str, report: RequestReport) -> EditResult:
    return EditResult(method, [EditRequest(**REQUEST)], {}, per_request=[report])


def _post(p_new: float, p_true: float) -> list[dict]:
    return [{"rewrite": [{"prompt": "Eiffel Tower is located in the city of", "p_new": p_new, "p_true": p_true}]}]


def test_a_won_rewrite_has_no_note_and_a_lost_one_names_the_numbers_and_a_reason():
    result = _result("memit", RequestReport(losses=[{"p_target": 0.9}], reached=0.95))
    assert result.check_rewrites(_post(0.6, 0.2)) == [] and result.diagnostics == []
    (note,) = result.check_rewrites(_post(0.1, 0.4))
    assert note.kind == "rewrite_failed" and note.request == 0
    assert "P(Rome) 0.100 is not above P(Paris) 0.400" in note.message
    assert result.check_rewrites(_post(0.1, 0.4)) and len(result.diagnostics) == 1  # replaced, not piled up


def test_the_likely_reason_follows_the_results_own_diagnostics():
    short = _result("memit", RequestReport(losses=[{"p_target": 0.05}] * 3))
    assert "target optimisation ended at P(new) 0.05 after 3 step(s)" in likely_reason(short, 0)
    spread = _result("memit", RequestReport(losses=[{"p_target": 0.9}], reached=0.4))
    assert "reached 40% of its target" in likely_reason(spread, 0)
    bound = _result("rome", RequestReport(losses=[{"p_target": 0.1}], details={"held_at_bound": True}))
    assert "shift bound v_max_norm" in likely_reason(bound, 0)


def _losing(lm) -> dict:
    """REQUEST with the tiny model's own top answer as the true target: an edit too weak to move it loses."""
    from editkit.api import predict

    top = predict(lm, "Eiffel Tower is located in the city of", k=1).to_json()["predictions"][0]["token"]
    return {**REQUEST, "target_true": top}


def test_ultraedit_that_does_not_win_says_its_lr_was_chosen_to_keep_the_neighbours(tiny_by_name):
    lm = tiny_by_name("tiny-gemma3")
    report = edit_report(lm, "ultraedit", _losing(lm), {"lr": 1e-12})
    (note,) = [d for d in report.result.diagnostics if d.kind == "rewrite_failed"]
    assert "UltraEdit's step is lr" in note.message and "(1e-12)" in note.message
    assert str(note) in report.headline()
    back = type(report).from_json(report.to_json())  # the JSON the CLI prints keeps it
    assert back.result.diagnostics == report.result.diagnostics


def test_coedit_without_a_relation_says_it_wrote_nothing_implied_and_which_field_gives_one(tiny_by_name):
    lm = tiny_by_name("tiny-gemma3")
    report = edit_report(lm, "coedit", {**REQUEST, "prompt": "My favourite landmark, {}, stands in"},
                         {"v_num_grad_steps": 2})
    (note,) = [d for d in report.result.diagnostics if d.kind == "nothing_implied"]
    assert note.request == 0 and "edited it as MEMIT would" in note.message
    assert "`relation`" in note.hint and "P131" in note.hint
    assert isinstance(note, Diagnostic) and note.hint in str(note)


def test_the_command_line_prints_the_notes(tiny_by_name, capsys):
    from editkit.commands import edit

    lm = tiny_by_name("tiny-gemma3")
    report = edit_report(lm, "ultraedit", _losing(lm), {"lr": 1e-12})
    edit.show(report)
    assert "note: The edit does not win its own rewrite" in capsys.readouterr().out
