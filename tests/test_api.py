"""The notebook API (editkit/api.py) and its typed results on a tiny model: each call returns a result whose JSON
reads back to the same result, whose table and figure build, and which shows itself in a notebook; the package
imports lazily; the results the package ships read back unchanged."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import editkit
from editkit.core.errors import EditkitError
from editkit.core.paths import ASSETS

ROOT = Path(__file__).resolve().parent.parent
PROMPT, SUBJECT = "The Eiffel Tower is located in", "Eiffel Tower"
REQUEST = {"prompt": "{} is located in", "subject": "The Eiffel Tower", "target_new": "Rome", "target_true": "Paris",
           "paraphrase_prompts": ["Where is the Eiffel Tower? It is in"]}


@pytest.fixture(scope="module")
def lm():
    return editkit.load("tiny-gpt2", device="cpu")


def round_trips(result):
    """to_json -> from_json gives the same result, through JSON text too; a table and a notebook view build."""
    cls = type(result)
    data = result.to_json()
    assert cls.from_json(data).to_json() == data
    assert cls.from_json(json.dumps(data)).to_json() == data
    assert len(result.to_frame()) > 0
    assert result._repr_html_().startswith(f"<p><b>{cls.__name__}</b>")


def test_predict_and_the_logit_lens(lm):
    p = editkit.predict(lm, PROMPT, k=3)
    assert len(p) == 3 and p.top.prob >= p[1].prob >= p[2].prob and p.model == lm.name
    round_trips(p)
    assert list(p.to_frame().columns) == ["rank", "token", "token_id", "prob", "logit"]
    assert len(p.figure().data[0].x) == 3
    lens = editkit.logit_lens(lm, PROMPT, k=2)
    assert len(lens.layers) == lm.adapter.n_layers and lens.layers[-1][0].token == p.top.token
    round_trips(lens)


def test_trace_one_kind_and_all_kinds(lm, tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    traces = editkit.trace(lm, PROMPT, SUBJECT, samples=2, window=2)
    assert isinstance(traces, editkit.Traces) and list(traces) == ["hidden", "mlp", "attn"]
    round_trips(traces)
    frame = traces.to_frame()
    assert set(frame["kind"]) == {"hidden", "mlp", "attn"}
    assert len(frame) == 3 * len(traces.tokens) * lm.adapter.n_layers
    assert len(traces.figure().data) == 3  # three heatmaps side by side
    one = editkit.trace(lm, PROMPT, SUBJECT, kind="mlp", samples=2, window=2)
    assert isinstance(one, editkit.TraceResult) and one.scores == traces["mlp"].scores and one.cached
    round_trips(one)
    assert [list(r) for r in one.figure().data[0].z] == one.scores
    spec = editkit.TraceSpec(PROMPT, SUBJECT, samples=2, window=2, kinds=("hidden",))
    assert editkit.trace(lm, spec)["hidden"].scores == traces["hidden"].scores
    sev = editkit.severing(lm, PROMPT, SUBJECT, samples=2)
    assert len(sev.none) == lm.adapter.n_layers and sev.none == traces["hidden"].scores[sev.token]
    round_trips(sev)
    with pytest.raises(EditkitError, match="kind must be one of"):
        editkit.trace(lm, PROMPT, SUBJECT, kind="mlps")


def test_edit_measures_before_and_after_and_the_edit_applies_only_where_asked(lm):
    report = editkit.edit(lm, "rome", REQUEST)
    assert isinstance(report, editkit.EditReport) and report.method == "rome" and report.delta
    rows = report.to_frame()
    assert list(rows["group"]) == ["rewrite", "paraphrase"]
    assert rows["p_new_post"][0] > rows["p_new_pre"][0]  # ROME raised P(new) on its own prompt
    round_trips(report)
    assert report.figure().data and report.result.figure().data
    round_trips(report.result)
    assert editkit.EditResult.from_json(report.result.to_json()).delta == {}  # the delta is not in the JSON
    before = editkit.predict(lm, PROMPT)
    after = editkit.predict(lm, PROMPT, edit=report)
    assert after != before and editkit.predict(lm, PROMPT) == before  # the base weights stay
    with report.applied(lm):
        assert editkit.predict(lm, PROMPT) == after
    with pytest.raises(EditkitError, match="no weight change"):
        editkit.predict(lm, PROMPT, edit=editkit.EditReport.from_json(report.to_json()))
    with pytest.raises(EditkitError):
        editkit.edit(lm, "rome", {"prompt": "no subject slot", "subject": "x", "target_new": "y"})
    with pytest.raises(EditkitError, match="method must be one of .* not {'prompt'"):  # arguments swapped
        editkit.edit(lm, REQUEST, "rome")


@pytest.mark.full  # two edits and their measurements: the edit test keeps the quick tier's check of the API
def test_compare_two_methods_and_read_the_table_back(lm):
    cmp = editkit.compare(lm, REQUEST, ["rome", "memit"])
    assert list(cmp.methods) == ["rome", "memit"] and set(cmp.deltas) == {"rome", "memit"}
    table = cmp.to_frame()
    assert list(table["method"]) == ["before edit", "ROME", "MEMIT"]
    round_trips(cmp)
    assert editkit.Comparison.from_json(cmp.to_json()).to_frame().equals(table)
    assert cmp.figure("paraphrase").data and cmp.norms_figure().data and cmp.figure("neighborhood") is None


@pytest.mark.full  # a second ROME edit through the CLI; test_editing checks the command in the quick tier
def test_the_cli_prints_the_reports_json(lm, tmp_path, capsys):
    """`edit --json` is EditReport.to_json(): it reads back as the report."""
    from editkit.cli import main

    path = tmp_path / "req.json"
    path.write_text(json.dumps(REQUEST))
    assert main(["edit", "--model", "tiny-gpt2", "--method", "rome", "--requests", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"model", "method", "seconds", "eval_seconds", "info", "requests", "hparams"}
    assert editkit.EditReport.from_json(data).to_json() == data


def test_evaluate_takes_a_set_name_for_its_spec(lm, tmp_path, monkeypatch):
    """evaluate(lm, methods, "counterfact") as a researcher writes it (the spec took only an EvalSpec and failed with
    an AttributeError); anything else is one message."""
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    res = editkit.evaluate(lm, "ultraedit", "counterfact-first5", out_dir=tmp_path / "runs")
    assert res.to_frame().shape[0] == 2  # before the edit, and UltraEdit
    with pytest.raises(EditkitError, match="spec must be an EvalSpec or the name of a set"):
        editkit.evaluate(lm, "ultraedit", 5)
    with pytest.raises(EditkitError, match="unknown evaluation set 'nosuch'"):
        editkit.sweep(lm, "rome", {"v_lr": [0.5]}, "nosuch")


def test_shipped_results_read_back_unchanged():
    """The AIE runs in assets/results are what `aie --json` wrote: they read into AIE and write back the same."""
    files = sorted((ASSETS / "results").glob("aie-*.json"))
    assert files
    for path in files:
        data = json.loads(path.read_text())
        run = editkit.AIE.from_json(path)
        assert run.to_json() == data, path.name
        assert len(run.to_frame()) == sum(len(b["mean"]) for per in data["kinds"].values() for b in per.values())
    assert set(editkit.shipped_aie()) == {json.loads(p.read_text())["model"] for p in files}


def test_from_json_of_something_else_is_one_message(tmp_path):
    with pytest.raises(EditkitError, match="holds no TraceResult"):
        editkit.TraceResult.from_json({"kind": "mlp"})
    with pytest.raises(EditkitError, match="cannot read"):
        editkit.Traces.from_json(tmp_path / "missing.json")


def test_import_is_lazy_and_no_api_name_is_a_submodule():
    """`import editkit` and `import editkit.core.errors` load no torch (a worker's or page's import stays light);
    every name the package lists resolves; none is shadowed by a submodule of the same name."""
    code = ("import sys, editkit, editkit.core.errors; assert 'torch' not in sys.modules, 'torch'; "
            "editkit.TraceSpec; assert 'editkit.api' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    submodules = {p.stem for p in (ROOT / "editkit").iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert not set(editkit.__all__) & submodules
    for name in editkit.__all__:
        assert getattr(editkit, name) is not None, name
    with pytest.raises(AttributeError):
        _ = editkit.no_such_thing
