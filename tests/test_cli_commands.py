"""The CLI covers the library: geva, intervene and apply-patch give the library's numbers as JSON, and bad input
is one `error:` line with exit status 2."""
import json
import re
import statistics

import pytest

from editkit.cli import main
from editkit.editing.run import run_edit
from editkit.memories.intervene import intervene
from editkit.model.loading import load_model
from editkit.model.scoring import score_targets
from editkit.model.weights import applied, save_patch

REQUEST = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English",
           "target_true": "French", "neighborhood_prompts": ["The mother tongue of Jean Gabin is"]}


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_apply_patch_reports_the_edit(tmp_path, capsys, tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    result = run_edit(lm, "rome", REQUEST, {"v_num_grad_steps": 3})
    save_patch(tmp_path / "p", result.delta, {"model": lm.name, "method": "rome", "requests": [REQUEST]})
    out = _json(capsys, ["apply-patch", "--model", "tiny-gpt2", "--patch", str(tmp_path / "p"), "--json"])
    rewrite = out["prompts"][0]
    assert rewrite["prompt"] == "The mother tongue of Danielle Darrieux is" and len(out["prompts"]) == 2
    with applied(lm, result.delta):
        p_after = score_targets(lm, [rewrite["prompt"]], [" English"])[0].prob
    assert rewrite["after"]["targets"][" English"] == pytest.approx(p_after, rel=1e-5)
    assert rewrite["before"]["targets"][" English"] == pytest.approx(
        score_targets(lm, [rewrite["prompt"]], [" English"])[0].prob, rel=1e-5)
    assert rewrite["after"]["targets"][" English"] > rewrite["before"]["targets"][" English"]
    custom = _json(capsys, ["apply-patch", "--model", "tiny-gpt2", "--patch", str(tmp_path / "p"), "--prompt",
                            "Paris is the capital of", "--target", "France", "--json"])
    assert list(custom["prompts"][0]["before"]["targets"]) == [" France"]


def test_apply_patch_bad_inputs(tmp_path, capsys):
    (tmp_path / "bad.safetensors").write_bytes(b"not a patch")
    assert main(["apply-patch", "--model", "tiny-gpt2", "--patch", str(tmp_path / "bad")]) == 2
    assert "cannot read patch" in capsys.readouterr().err
    assert main(["apply-patch", "--model", "tiny-gpt2", "--patch", str(tmp_path / "none.json")]) == 2
    assert re.search(r"no patch at .*none\.safetensors \(a patch is a \.safetensors file", capsys.readouterr().err)
    other = load_model("tiny-llama", device="cpu")  # a patch for another architecture names other parameters
    result = run_edit(other, "rome", REQUEST, {"v_num_grad_steps": 2})
    save_patch(tmp_path / "llama", result.delta, {"model": "tiny-llama", "requests": [REQUEST]})
    assert main(["apply-patch", "--model", "tiny-gpt2", "--patch", str(tmp_path / "llama")]) == 2
    assert "does not have" in capsys.readouterr().err


def test_intervene_cli_equals_library(capsys, tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    out = _json(capsys, ["intervene", "--model", "tiny-llama", "--prompt", "The Space Needle is in", "--memory",
                         "L1.M3", "--memory", "L2.M7", "--mode", "off", "--json"])
    ref = intervene(lm, "The Space Needle is in", [(1, 3), (2, 7)], "off").to_json()
    assert out["after"] == ref["after"] and out["before"] == ref["before"]
    assert [m["coefficient_after"] for m in out["memories"]] == [0.0, 0.0]
    for bad in (["--memory", "L9.M3"], ["--memory", "nonsense"], ["--memory", "L1.M99999"]):
        assert main(["intervene", "--model", "tiny-llama", "--prompt", "x", *bad]) == 2
        err = capsys.readouterr().err  # after the loader's "[editkit] memory estimate ..." lines
        assert err.splitlines()[-1].startswith("error:") and "Traceback" not in err


def test_geva_cli(capsys, tiny_by_name):
    out = _json(capsys, ["geva", "--model", "tiny-llama", "--positions", "20", "--memories", "32", "--json"])
    L = tiny_by_name("tiny-llama").adapter.n_layers
    assert len(out["agreement"]) == len(out["compositional"]) == len(out["fixed_by"]) == L
    assert all(0 <= a <= 1 for a in out["agreement"]) and out["fixed_by"][-1] == pytest.approx(1.0)
    assert main(["geva", "--model", "tiny-llama", "--positions", "0"]) == 2


def test_anchor_cli_gives_nas_its_reference_norm(capsys, tiny_by_name):
    """`anchor` prints the library's n_bar; the value, passed back as nas_anchor, is the norm every edit writes;
    bad input is one error line."""
    from editkit.editing.run import anchor_from_edits
    from editkit.evaluation import load_eval_set, requests_of
    out = _json(capsys, ["anchor", "--model", "tiny-gpt2", "--set", "counterfact-first5", "--n", "3",
                         "--hparams-json", '{"rome": {"v_num_grad_steps": 2}}', "--json"])
    lm = tiny_by_name("tiny-gpt2")
    requests = requests_of(load_eval_set("counterfact-first5", 3))
    want = anchor_from_edits(lm, "rome", requests, {"v_num_grad_steps": 2})
    assert out["anchor"] == pytest.approx(want.anchor, rel=1e-5) and out["n"] == 3
    edit = run_edit(lm, "rome", requests[:1], {"v_num_grad_steps": 2, "nas_anchor": out["anchor"]})
    assert edit.per_request[0].details["nas"]["written_norm"] == pytest.approx(out["anchor"])
    # the text names the shift bound at this method's layer by ROME's rule (the median shift), not ROME's number
    assert main(["anchor", "--model", "tiny-gpt2", "--set", "counterfact-first5", "--n", "3",
                 "--hparams-json", '{"rome": {"v_num_grad_steps": 2}}']) == 0
    said = capsys.readouterr().out
    bound = float(said.split('"v_max_norm": ')[1].split("}")[0])
    assert bound == pytest.approx(statistics.median(out["shift_norms"]), rel=1e-3)
    for argv, message in [(["--method", "ultraedit"], "no norm-anchor option"), (["--n", "0"], "at least 1"),
                          (["--hparams-json", "[1]"], "must map a method"), (["--quantile", "2"], "quantile")]:
        assert main(["anchor", "--model", "tiny-gpt2", *argv]) == 2
        assert message in capsys.readouterr().err
