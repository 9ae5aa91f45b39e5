"""The results manifest (assets/results/manifest.json, editkit/evaluation/manifest.py): every shipped table resolves
against the committed files and today's defaults and equals what is shown; a renamed file, a hyperparameter added
without a NEUTRAL value, a table edited by hand or a file no entry reads are each found."""
import json
import shutil
from dataclasses import dataclass, replace

import pytest

from editkit.core.errors import EditkitError
from editkit.core.paths import ROOT
from editkit.editing.methods import get, register
from editkit.editing.methods.coedit import CoeditHparams
from editkit.evaluation import manifest

ENTRY = "ripple-coedit-keep"  # co-edit's validation settings: MEMIT's and co-edit's files on both models


def test_every_shipped_result_resolves_and_every_shown_table_is_its_rebuild():
    out = manifest.check()
    assert out.ok, out.headline()
    assert len(out.entries) >= 10 and out.seconds < 60


def test_no_shipped_result_file_is_read_by_no_entry():
    assert manifest.orphans() == []


@pytest.fixture
def copy(tmp_path):
    """A checkout holding only the manifest, ENTRY's files and where it is shown."""
    e = manifest.entry(ENTRY)
    for rel in [str(manifest.MANIFEST), *e["reads"], *(p.partition("#")[0] for p in e["shown"])]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_the_copy_checks_clean(copy):
    assert manifest.check([ENTRY], copy).ok


def test_a_renamed_shipped_file_fails_the_check_naming_the_entry_and_its_command(copy):
    e = manifest.entry(ENTRY)
    path = copy / next(p for p in e["reads"] if "-coedit-" in p)
    path.rename(path.with_name(path.name.replace(".jsonl", "-renamed.jsonl")))
    out = manifest.check([ENTRY], copy)
    assert not out.ok
    first = out.problems[0]
    assert first.entry == ENTRY and first.command == e["command"] and path.name in first.message
    assert f"{ENTRY}: " in str(first) and "rebuild: python -m editkit" in str(first)


@dataclass(frozen=True)
class _WithAKnob(CoeditHparams):
    new_knob: float = 1.0  # a field added after the rows were written


@dataclass(frozen=True)
class _Declared(_WithAKnob):
    NEUTRAL = {**_WithAKnob.NEUTRAL, "new_knob": 1.0}  # 1.0 means the behaviour before it


def test_a_field_added_without_a_neutral_value_fails_the_check_and_passes_once_declared(copy):
    coedit = get("coedit")
    try:
        register(replace(coedit, hparams=_WithAKnob))
        out = manifest.check([ENTRY], copy)
        assert not out.ok and all(p.entry == ENTRY for p in out.problems)
        assert "new_knob 1.0 today, absent in the file" in out.problems[0].message
        register(replace(coedit, hparams=_Declared))
        assert manifest.check([ENTRY], copy).ok
    finally:
        register(coedit)


def test_a_table_edited_by_hand_fails_and_write_rebuilds_it(copy):
    doc = copy / "docs" / "results" / "ripple.md"
    text = doc.read_text()
    block = manifest.BLOCK.search(text[text.index(f"<!-- results: {ENTRY} -->"):])
    doc.write_text(text.replace(block.group(0), block.group(0).replace("+27.5", "+29.5", 1)))
    out = manifest.check([ENTRY], copy)
    assert [p.message for p in out.problems] == [
        "the table shown in docs/results/ripple.md differs from the one its rows give now"]
    assert manifest.write([ENTRY], copy) == ["docs/results/ripple.md"]
    assert doc.read_text() == text and manifest.check([ENTRY], copy).ok


def test_prune_lists_and_deletes_only_what_no_entry_reads(copy):
    stray = (copy / "assets" / "results" / "ripple" / "gemma-3-270m"
             / "ripple-memit-gemma-3-270m-counterfact-0000000000.jsonl")
    stray.write_text("{}\n")
    read = [copy / p for p in manifest.entry(ENTRY)["reads"]]
    assert manifest.prune(root=copy) == [str(stray.relative_to(copy))]
    manifest.prune(delete=True, root=copy)
    assert not stray.exists() and all(p.exists() for p in read)


def test_an_unknown_entry_or_kind_is_one_line(copy):
    with pytest.raises(EditkitError, match="no results manifest entry 'nope'"):
        manifest.check(["nope"], copy)
    data = json.loads((copy / manifest.MANIFEST).read_text())
    data["entries"][0]["kind"] = "chart"
    (copy / manifest.MANIFEST).write_text(json.dumps(data))
    out = manifest.check([data["entries"][0]["name"]], copy)
    assert "kind must be one of" in out.problems[0].message


def test_the_command_line(capsys):
    from editkit.cli import main

    assert main(["results", "check", ENTRY, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert main(["results", "prune"]) == 0
    with pytest.raises(SystemExit):
        main(["results", "chart"])


def test_operating_points_mark_todays_default_and_say_what_it_buys_and_costs():
    ultra = manifest.operating_points("ultraedit", "gemma-3-270m")
    (default,) = [p for p in ultra.points if p.default]
    assert default.setting["lr"] == 5e-7 and (default.x, default.y) == (26, 96)
    assert ultra.sentence().startswith("Today's default (layers 12-16, lr 5e-7, ridge 1) buys neighbours kept 96%")
    stronger = next(i for i, p in enumerate(ultra.points) if p.setting["lr"] == 2e-6 and p.setting["ridge"] == 1)
    assert ultra.picked(stronger) == ("layers 12-16, lr 2e-6, ridge 1: efficacy 66% (the default: 26%) with "
                                      "neighbours kept 75% (the default: 96%).")
    assert ultra.ran_at({"layers": [12, 13, 14, 15, 16], "lr": 5e-7, "ridge": 1.0}).startswith("It ran at today's")
    assert "not measured" in ultra.ran_at({"layers": [12, 13, 14, 15, 16], "lr": 4e-7, "ridge": 1.0})
    coedit = manifest.operating_points("coedit", "smollm2-135m")
    assert sum(p.default for p in coedit.points) == 1 and coedit.x_label == "logical generalization"
    assert manifest.operating_points("rome", "gemma-3-270m") is None


def test_a_sweep_without_todays_default_fails_the_check(tmp_path):
    name = "ultraedit-points-gemma-3-270m"
    e = manifest.entry(name)
    for rel in [str(manifest.MANIFEST), *e["reads"], *(p.partition("#")[0] for p in e["shown"])]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    assert manifest.check([name], tmp_path).ok
    path = tmp_path / e["file"]
    data = json.loads(path.read_text())
    data["rows"] = [r for r in data["rows"] if r["setting"]["lr"] != 5e-7]
    path.write_text(json.dumps(data))
    out = manifest.check([name], tmp_path)
    assert any("today's default lr of ultraedit for gemma-3-270m is not among" in p.message for p in out.problems)
