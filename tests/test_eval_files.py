"""Bring your own data: evaluate --set FILE with CounterFact, EasyEdit or zsRE records; errors name the record."""
import json

import pytest

from editkit.cli import main
from editkit.core.errors import EditkitError
from editkit.evaluation.datasets import load_eval_file, load_eval_set, set_id

ROME_SCHEMA = {"case_id": 7,
               "requested_rewrite": {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux",
                                     "target_new": {"str": "English"}, "target_true": {"str": "French"}},
               "paraphrase_prompts": ["Danielle Darrieux, a native speaker of"],
               "neighborhood_prompts": ["The mother tongue of Jean Gabin is"], "generation_prompts": ["She"],
               "attribute_prompts": ["The mother tongue of Tony Blair is"]}
EASYEDIT = {"case_id": 10, "prompt": "BBC One, by", "target_new": "Sega", "subject": "BBC One", "ground_truth": "BBC",
            "rephrase_prompt": "BBC One is owned by", "locality_prompt": "BBC Radio, by",
            "locality_ground_truth": "BBC"}
ZSRE = {"subject": "Watts Humphrey", "src": "What university did Watts Humphrey attend?",
        "alt": "University of Michigan",
        "answers": ["Illinois Institute of Technology"], "rephrase": "What university did Watts Humphrey go to?",
        "loc": "nq question: who played desmond doss father in hacksaw ridge", "loc_ans": "Hugo Weaving"}


def _write(tmp_path, name, records, jsonl=False):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in records) if jsonl else json.dumps(records))
    return path


@pytest.mark.parametrize("record,kind", [(ROME_SCHEMA, "counterfact"), (EASYEDIT, "counterfact"), (ZSRE, "zsre")])
@pytest.mark.parametrize("jsonl", [False, True])
def test_each_schema_loads_like_the_shipped_sets(tmp_path, record, kind, jsonl):
    path = _write(tmp_path, "mine.jsonl" if jsonl else "mine.json", [record, record], jsonl)
    recs = load_eval_set(str(path), 1)
    assert len(recs) == 1 and recs[0].kind == kind
    r = recs[0].request
    assert r.target_new.strip() in ("English", "Sega", "University of Michigan")
    if record is ROME_SCHEMA:
        assert recs[0].reference_text and r.neighborhood_prompts and r.paraphrase_prompts
    if record is EASYEDIT:
        assert recs[0].locality == [("BBC Radio, by", " BBC")]
    if record is ZSRE:
        assert recs[0].locality and r.target_true.strip() == "Illinois Institute of Technology"


def test_the_shipped_file_itself_loads_as_a_file(tmp_path):
    shipped = load_eval_set("counterfact", 3)
    from editkit.core.paths import DATA

    mine = load_eval_file(DATA / "counterfact" / "counterfact_500.json", 3)
    assert [r.request.to_dict() for r in mine] == [r.request.to_dict() for r in shipped]


@pytest.mark.parametrize("content,message", [
    ("", "is empty"),
    ("{not json", "not valid JSON"),
    ('{"a": 1}\n{"b": ', "line 2: not valid JSON"),
    ("42", "list of records"),
    ("[]", "holds no records"),
    (json.dumps([EASYEDIT, "text"]), "record 2: expected an object"),
    (json.dumps([EASYEDIT, {**EASYEDIT, "case_id": 99, "subject": "ITV"}]), r"record 2 \(case_id 99\): .*ITV"),
    (json.dumps([EASYEDIT, {**EASYEDIT, "target_new": ""}]), "record 2 .*the new target is empty"),
    (json.dumps([EASYEDIT, {**EASYEDIT, "target_new": "BBC"}]),
     "record 2 .*the new target is the same as the true target"),
    (json.dumps([EASYEDIT, ZSRE]), "record 2: a zsre record in a file of counterfact records"),
    (json.dumps([{**ZSRE, "alt": " "}]), "record 1: the new answer 'alt' is empty"),
    (json.dumps([{"requested_rewrite": "x"}]), "record 1: requested_rewrite must be an object"),
])
def test_bad_files_name_the_record(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(EditkitError, match=message):
        load_eval_set(str(path))
    assert "bad.json" in _error(path)


def _error(path):
    try:
        load_eval_set(str(path))
    except EditkitError as exc:
        return str(exc)
    return ""


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(EditkitError, match="no records file"):
        load_eval_set(str(tmp_path / "none.json"))
    bad = tmp_path / "bin.json"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(EditkitError, match="cannot read"):
        load_eval_set(str(bad))
    with pytest.raises(EditkitError, match="unknown evaluation set"):
        load_eval_set("counterfactt")


def test_set_id_follows_the_content(tmp_path):
    a = _write(tmp_path, "a.json", [EASYEDIT])
    first = set_id(str(a))
    a.write_text(json.dumps([EASYEDIT, EASYEDIT]))
    assert set_id(str(a)) != first and set_id("counterfact") == "counterfact"


@pytest.mark.full  # slow on 2 cores; the quick tier keeps cheaper checks of the same code
def test_cli_evaluate_own_file(tmp_path, capsys):
    path = _write(tmp_path, "mine.json", [ROME_SCHEMA])
    assert main(["evaluate", "--model", "tiny-gpt2", "--methods", "rome", "--set", str(path), "--n", "1",
                 "--gen-prompts", "0", "--out", str(tmp_path / "out"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n"] == 1 and "mine" in out["set"] and out["methods"]["rome"]["records"] == 1
    assert "post_gen_efficacy" in out["methods"]["rome"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([ROME_SCHEMA, {"case_id": 3, "prompt": "no subject here"}]))
    assert main(["evaluate", "--model", "tiny-gpt2", "--methods", "rome", "--set", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.json, record 2 (case_id 3)" in err


def test_uploads_are_checked_and_kept_by_content(tmp_path):
    from editkit.evaluation.datasets import save_upload

    data = json.dumps([EASYEDIT]).encode()
    path = save_upload("my set.json", data, tmp_path)
    assert path.parent == tmp_path and path.suffix == ".json" and path.read_bytes() == data
    assert save_upload("my set.json", data, tmp_path) == path  # same content, same file
    assert load_eval_set(str(path))[0].request.target_new == " Sega"
    with pytest.raises(EditkitError, match=r"x.jsonl, line 1"):
        save_upload("x.jsonl", b"{oops", tmp_path)
    with pytest.raises(EditkitError, match="not UTF-8"):
        save_upload("x.json", b"\xff\xfe", tmp_path)
