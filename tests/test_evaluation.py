"""Shipped evaluation sets by name, batch evaluation (resumable, base weights untouched) and sequential editing
(base weights restored bitwise) on tiny models, and the evaluate CLI."""
import json

import pytest
import torch

from editkit.core.errors import EditkitError
from editkit.evaluation import (
    EVAL_SETS,
    EvalSpec,
    SequentialSpec,
    edit_and_measure,
    evaluate,
    load_eval_set,
    requests_of,
    sequential,
)

FAST = {"v_num_grad_steps": 3}


def _snapshot(lm):
    return {n: p.detach().clone() for n, p in lm.model.named_parameters()}


def _unchanged(lm, snap):
    return all(torch.equal(p, snap[n]) for n, p in lm.model.named_parameters())


def test_eval_sets_load_by_name():
    counts = {"counterfact": 500, "counterfact-first5": 5, "counterfact-val": 1919, "counterfact-edit": 10000,
              "zsre": 998}
    assert set(EVAL_SETS) == set(counts)
    for name, count in counts.items():
        assert len(load_eval_set(name)) == count, name
    cf = load_eval_set("counterfact", 3)
    assert len(cf) == 3 and cf[0].kind == "counterfact" and cf[0].source == "counterfact:20952"
    r = cf[0].request
    assert r.target_true == " Africa" and r.target_new == " Antarctica"
    assert (len(r.paraphrase_prompts), len(r.neighborhood_prompts), len(r.generation_prompts)) == (2, 10, 10)
    assert cf[0].reference_text.count(" Antarctica.") == 10  # the attribute prompts completed with target_new
    assert cf[0].locality == [(p, " Africa") for p in r.neighborhood_prompts]
    first = load_eval_set("counterfact-first5", 1)[0].request
    assert first.rewrite == "The mother tongue of Danielle Darrieux is" and first.target_new == " English"
    val = load_eval_set("counterfact-val", 2)
    assert val[0].locality == [("BBC Radio, by", " BBC")] and val[0].request.paraphrase_prompts
    assert val[0].reference_text is None and not val[0].request.generation_prompts
    z = load_eval_set("zsre", 2)
    assert z[0].kind == "zsre" and z[0].request.rewrite == "What is the product made by UniFirst?"
    assert z[0].request.target_new == " unmanned aircraft" and z[0].request.target_true == " uniform"
    assert z[0].locality == [("nq question: john goodman's character in the big lebowski", " Walter Sobchak")]
    assert not z[0].request.neighborhood_prompts
    assert len(requests_of(z)) == 2 and requests_of(z)[0] is z[0].request
    with pytest.raises(EditkitError, match="unknown evaluation set"):
        load_eval_set("nope")
    with pytest.raises(EditkitError, match="at least 1"):
        load_eval_set("counterfact", 0)


def test_edit_and_measure_leaves_the_model(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    snap = _snapshot(lm)
    rows = edit_and_measure(lm, "rome", load_eval_set("counterfact", 1), FAST, EvalSpec(n_gen=1, gen_tokens=5))
    assert _unchanged(lm, snap)
    row = rows[0]
    assert row["relative_norm"] and all(v > 0 for v in row["relative_norm"].values())
    assert row["pre"]["generations"][0]["text"].startswith(load_eval_set("counterfact", 1)[0].request
                                                             .generation_prompts[0])
    m = row["metrics"]
    assert m["post_efficacy"] in (0.0, 1.0) and m["post_fluency"] > 0 and m["locality"] is not None
    # the edit changes the rewrite's NLLs
    assert row["post"]["rewrite"]["nll_new"] != row["pre"]["rewrite"]["nll_new"]


@pytest.mark.full  # slow on 2 cores; the quick tier keeps cheaper checks of the same code
def test_evaluate_runs_and_resumes(tiny_by_name, tmp_path):
    lm = tiny_by_name("tiny-llama")
    snap = _snapshot(lm)
    kw = dict(spec=EvalSpec(n=2, batch=1, n_gen=1, gen_tokens=6), out_dir=tmp_path,
              hparams={"rome": FAST, "memit": FAST})
    out = evaluate(lm, ["rome", "memit"], **kw)
    assert _unchanged(lm, snap)
    assert out.computed_records == 4 and out.generation["gen_tokens"] == 6
    data = json.loads(json.dumps(out.to_json()))
    assert type(out).from_json(data) == out and len(out.to_frame()) == 3 and len(out.figure().data) == 3
    for method in ("rome", "memit"):
        t = out.methods[method]
        assert t["records"] == 2 and t["seconds_per_request"] > 0
        for key in ("pre_efficacy", "post_efficacy", "post_generalization", "post_specificity", "post_fluency",
                    "post_consistency", "post_reliability", "locality"):
            assert t[key]["mean"] is not None, key
        assert t["post_portability"]["mean"] is None  # no shipped set has portability prompts
        lines = open(t["results_file"]).read().splitlines()
        assert len(lines) == 2 and json.loads(lines[0])["metrics"]["post_fluency"] > 0
    pre_files = list(tmp_path.glob("pre-*.jsonl"))
    assert len(pre_files) == 1 and len(pre_files[0].read_text().splitlines()) == 2  # pre once per record
    again = evaluate(lm, ["rome", "memit"], **kw)
    assert again.computed_records == 0
    assert again.methods == out.methods
    for method in ("rome", "memit"):  # nothing recomputed: the files did not grow
        assert len(open(again.methods[method]["results_file"]).read().splitlines()) == 2
    # a line cut by an interruption is detected and only that record is recomputed
    path = again.methods["rome"]["results_file"]
    lines = open(path).read().splitlines()
    open(path, "w").write(lines[0] + "\n" + lines[1][: len(lines[1]) // 2] + "\n")
    third = evaluate(lm, ["rome", "memit"], **kw)
    assert third.computed_records == 1 and third.methods["rome"]["records"] == 2
    assert _unchanged(lm, snap)
    with pytest.raises(EditkitError):
        evaluate(lm, ["nope"], EvalSpec(n=1), out_dir=tmp_path)


def test_sequential_restores_base_weights(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    snap = _snapshot(lm)
    records = requests_of(load_eval_set("counterfact", 3))
    out = sequential(lm, "rome", records, FAST, SequentialSpec(ppl_tokens=64))
    assert _unchanged(lm, snap)
    rows = out.rows
    assert [r["edit"] for r in rows] == [1, 2, 3] and out.base_perplexity > 1
    assert rows[0]["retention"] is None  # no earlier edits yet
    norms = [r["total_relative_norm"] for r in rows]
    assert all(n > 0 for n in norms) and all(r["perplexity"] > 1 for r in rows)
    for r in rows:
        assert r["collapsed"] == bool(r["reason"])
        assert r["collapsed"] == (r["perplexity"] > 2 * out.base_perplexity or
                                  (r["retention"] is not None and r["retention"] < 0.5))


def test_cli_evaluate(capsys, tmp_path):
    from editkit.cli import main
    assert main(["evaluate", "--model", "tiny-gpt2", "--methods", "rome", "--n", "1", "--gen-tokens", "5",
                 "--out", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["methods"]["rome"]["records"] == 1 and out["generation"]["gen_tokens"] == 5
    assert main(["evaluate", "--model", "tiny-gpt2", "--methods", "rome", "--n", "1", "--gen-tokens", "5",
                 "--out", str(tmp_path)]) == 0
    text = capsys.readouterr()
    assert "ROME" in text.out and "Efficacy" in text.out and "0 record(s) computed" in text.out
    assert main(["evaluate", "--list-sets", "--json"]) == 0
    assert "zsre" in json.loads(capsys.readouterr().out)["sets"]
    assert main(["evaluate", "--model", "tiny-gpt2", "--methods", "rome", "--set", "nope", "--json"]) == 2
    assert "unknown evaluation set" in capsys.readouterr().err
    save = tmp_path / "saved.json"
    assert main(["evaluate", "--model", "tiny-gpt2", "--methods", "rome", "--n", "1", "--gen-tokens", "5",
                 "--out", str(tmp_path), "--save", str(save)]) == 0
    assert json.loads(save.read_text())["methods"]["rome"]["records"] == 1
    assert main(["evaluate", "--model", "tiny-gpt2", "--methods", "rome", "--stop-after", "1"]) == 2
    assert "--stop-after: only for --sequential runs" in capsys.readouterr().err
    assert main(["evaluate", "--model", "tiny-gpt2", "--methods", "rome", "--sequential", "--out", str(tmp_path)]) == 2
    assert "--save FILE" in capsys.readouterr().err  # refused, never silently ignored
