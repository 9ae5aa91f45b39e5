"""Lifelong editing (evaluation/sequential.py): each batch at the weights the earlier ones left (and AlphaEdit's
state carried), resumable with the same result, sampled intermediate checkpoints, the fast scorers equal to the
plain ones, and the `evaluate --sequential` command."""
import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from editkit.core.errors import CacheWarning, EditkitError
from editkit.editing.run import run_edit
from editkit.evaluation import load_eval_set
from editkit.evaluation.lifelong import final_table
from editkit.evaluation.lifelong_measures import perplexity
from editkit.evaluation.pairs import pair_nlls
from editkit.evaluation.sequential import SequentialSpec, sequential
from editkit.figures.lifelong import curves
from editkit.model.loading import load_model
from editkit.model.scoring import score_targets
from editkit.model.weights import applied

FAST = {"v_num_grad_steps": 2}
SMALL = {"ppl_tokens": 64, "fluency_tokens": 5, "fluency_prompts": ("The city of",)}


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("method", ["memit", "alphaedit"])
def test_batches_build_on_each_other(tiny_by_name, method):
    """The accumulated delta equals a manual loop: batch 2 computed inside applied(batch 1's delta), with the state
    batch 1 returned; the shared weights are never written."""
    lm = tiny_by_name("tiny-gemma3")
    records = load_eval_set("counterfact", 4)
    snap = _snapshot(lm.model)
    out = sequential(lm, method, records, FAST, SequentialSpec(batch=2, sample=None, **SMALL), cache=False)
    assert all(torch.equal(p, snap[n]) for n, p in lm.model.named_parameters())
    first = run_edit(lm, method, [r.request for r in records[:2]], FAST)
    with applied(lm, first.delta):
        second = run_edit(lm, method, [r.request for r in records[2:]], FAST, state=first.state)
    from editkit.evaluation.sequential import STORE, _read

    saved = STORE.get(out.checkpoint, _read)
    for k in first.delta:
        torch.testing.assert_close(saved["total"][k], first.delta[k] + second.delta[k], rtol=1e-5, atol=1e-6)
    if method == "alphaedit":
        assert saved["state"].edits == 4 and saved["state"].keys(1).shape[1] == 4
    else:
        assert saved["state"] is None
    assert [r["edit"] for r in out.rows] == [2, 4] and out.complete


def test_resume_gives_the_same_run(tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    records = load_eval_set("counterfact", 6)
    whole = sequential(lm, "alphaedit", records, FAST, SequentialSpec(batch=2, sample=3, **SMALL), cache=False)
    part = sequential(lm, "alphaedit", records, FAST, SequentialSpec(batch=2, sample=3, stop_after=1, **SMALL),
                      cache=False)
    assert part.batches_done == 1 and not part.complete
    rest = sequential(lm, "alphaedit", records, FAST, SequentialSpec(batch=2, sample=3, **SMALL))
    assert rest.resumed_at_batch == 1 and rest.complete
    for a, b in zip(whole.rows, rest.rows):
        for k in ("edit", "measured", "efficacy", "generalization", "specificity", "retention", "took"):
            assert a[k] == b[k] or (a[k] is not None and abs(a[k] - b[k]) < 1e-9), k
        assert abs(a["total_relative_norm"] - b["total_relative_norm"]) < 1e-5
    # sampled intermediate checkpoints, every edit at the last; the output says so
    assert [r["sampled"] for r in rest.rows] == [False, True, False]
    assert [r["measured"] for r in rest.rows] == [2, 3, 6]
    assert "sample" in rest.notes
    table = final_table({"alphaedit": rest})
    assert table[0]["edits"] == 6 and table[0]["measured"] == 6
    assert curves({"alphaedit": rest.to_json()})["alphaedit"]["efficacy"]["x"] == [2, 4, 6]
    data = json.loads(json.dumps(rest.to_json()))
    assert type(rest).from_json(data) == rest and len(rest.to_frame()) == 3 and rest.figure().data


def test_an_unreadable_checkpoint_is_kept_aside_not_deleted(tiny_by_name):
    """A checkpoint the reader cannot read (a truncated copy, a format it does not know) is set aside with a warning
    that names it, never deleted: hours of lifelong editing stay on disk for their owner, and the run starts over."""
    lm = tiny_by_name("tiny-llama")
    records = load_eval_set("counterfact", 4)
    spec = SequentialSpec(batch=2, sample=2, stop_after=1, **SMALL)
    part = sequential(lm, "memit", records, FAST, spec)
    path = Path(part.checkpoint)
    broken = path.read_bytes()[:100]
    path.write_bytes(broken)
    with pytest.warns(CacheWarning, match="could not be read.*kept as .*unreadable"):
        again = sequential(lm, "memit", records, FAST, spec)
    aside = path.with_name(path.name + ".unreadable")
    assert aside.read_bytes() == broken and again.resumed_at_batch == 0 and again.batches_done == 1
    assert Path(again.checkpoint).exists()  # rebuilt beside the kept copy


def test_rome_checkpoints_every_k_edits(tiny_by_name):
    lm = tiny_by_name("tiny-gpt2")
    records = load_eval_set("counterfact", 4)
    out = sequential(lm, "rome", records, FAST, SequentialSpec(batch=1, eval_every=2, sample=None, **SMALL),
                     cache=False)
    assert [r["edit"] for r in out.rows] == [2, 4]
    assert out.rows[1]["retention"] is None or 0 <= out.rows[1]["retention"] <= 1
    with pytest.raises(EditkitError):
        sequential(lm, "rome", records, FAST, SequentialSpec(batch=2))
    with pytest.raises(EditkitError):
        sequential(lm, "memit", records, FAST, SequentialSpec(batch=2, eval_every=3))


def test_pair_nlls_equal_score_targets(tiny):
    records = load_eval_set("counterfact", 4)
    P, N, T = [], [], []
    for r in records:
        q = r.request
        for p in [q.rewrite] + q.paraphrase_prompts + q.neighborhood_prompts[:2]:
            P.append(p)
            N.append(q.target_new)
            T.append(q.target_true)
    P.append("The capital of France is")  # two multi-token targets: two rows
    N.append(" New South Wales")
    T.append(" Paris Texas")
    fast = pair_nlls(tiny, P, N, T, batch_tokens=100, tops=True)
    new, true = score_targets(tiny, P, N), score_targets(tiny, P, T)
    for (a, b, top), x, y in zip(fast, new, true):
        assert abs(a - x.mean_nll) < 1e-4 and abs(b - y.mean_nll) < 1e-4
        assert top == y.token_argmax  # the true target's teacher-forced argmax tokens (EasyEdit's locality)


def test_locality_is_measured_against_the_original_model(tiny_by_name):
    """kept / locality at the last checkpoint equal a recomputation with score_targets: the unedited model's
    neighborhood answers (read before any edit) against the answers at the run's final weights (EasyEdit #643)."""
    from editkit.evaluation.metrics import token_agreement
    from editkit.evaluation.sequential import STORE, _read

    lm = tiny_by_name("tiny-llama")
    records = load_eval_set("counterfact", 4)
    prompts = [p for r in records for p in r.request.neighborhood_prompts]
    owner = [i for i, r in enumerate(records) for _ in r.request.neighborhood_prompts]
    news = [records[i].request.target_new for i in owner]
    trues = [records[i].request.target_true for i in owner]

    def answers():
        new, true = score_targets(lm, prompts, news), score_targets(lm, prompts, trues)
        return [t.mean_nll < n.mean_nll for n, t in zip(new, true)], [t.token_argmax for t in true]

    before = answers()
    out = sequential(lm, "memit", records, {"v_num_grad_steps": 4}, SequentialSpec(batch=2, sample=None, **SMALL),
                     cache=False)
    with applied(lm, STORE.get(out.checkpoint, _read)["total"]):
        after = answers()
    kept, loc = [], []
    for i in range(len(records)):
        at = [j for j, o in enumerate(owner) if o == i]
        kept.append(sum(before[0][j] == after[0][j] for j in at) / len(at))
        loc.append(token_agreement([before[1][j] for j in at], [after[1][j] for j in at]))
    last = out.rows[-1]
    assert math.isclose(last["kept"], sum(kept) / len(kept), abs_tol=1e-9)
    assert math.isclose(last["locality"], sum(loc) / len(loc), abs_tol=1e-9)
    assert last["locality"] < 1 or last["kept"] < 1 or last["total_relative_norm"] == 0  # the edit was measured
    table = final_table({"memit": out})[0]
    assert table["locality"] == 100 * last["locality"] and "original" in out.notes.lower()


def test_perplexity_equals_full_logits(tiny_by_name):
    lm = tiny_by_name("tiny-neox")
    from editkit.data.corpus import token_chunks

    nll, count = 0.0, 0
    for chunk in token_chunks(lm.tok, 100, 50, split="test"):
        ids = torch.tensor([chunk])
        with torch.no_grad():
            logits = lm.model(input_ids=ids).logits[0, :-1].float()
        nll += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
        count += ids.shape[1] - 1
    assert math.isclose(perplexity(lm, 100, 50), math.exp(nll / count), rel_tol=1e-5)


def test_evaluate_sequential_command(tiny_by_name, tmp_path, capsys):
    from editkit.cli import main

    tiny_by_name("tiny-llama")
    save = tmp_path / "run.json"
    rc = main(["evaluate", "--model", "tiny-llama", "--sequential", "--methods", "rome,alphaedit", "--n", "4",
               "--batch", "2", "--batch-for", "rome=1", "--eval-every", "2", "--ppl-tokens", "64",
               "--fluency-tokens", "5", "--no-cache", "--save", str(save)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "ROME on tiny-llama, 4 edits in batches of 1" in text and "AlphaEdit" in text and "final" in text
    from editkit.evaluation.lifelong import load_results

    results = load_results(save)
    assert set(results) == {"rome", "alphaedit"} and results["rome"].batch == 1
    assert main(["evaluate", "--model", "tiny-llama", "--sequential", "--methods", "memit", "--batch-for",
                 "rome=x"]) == 2


def test_finalize_measures_every_edit_of_a_stopped_run(tiny_by_name):
    lm = tiny_by_name("tiny-llama")
    records = load_eval_set("counterfact", 6)
    part = sequential(lm, "memit", records, FAST,
                      SequentialSpec(batch=2, sample=1, stop_after=2, finalize=True, **SMALL), cache=False)
    assert part.batches_done == 2 and part.rows[-1]["measured"] == 1
    assert part.partial_final["edit"] == 4 and part.partial_final["measured"] == 4
    assert final_table({"memit": part})[0]["measured"] == 4
    rest = sequential(lm, "memit", records, FAST, SequentialSpec(batch=2, sample=1, **SMALL))
    assert rest.resumed_at_batch == 2 and [r["edit"] for r in rest.rows] == [2, 4, 6]


def test_shipped_lifelong_files_read_back_unchanged():
    """What `evaluate --sequential --save` wrote (assets/results/lifelong-*.json) reads into Lifelong and writes back
    the same JSON."""
    from editkit.evaluation.lifelong import SHIPPED, SHIPPED_1000, SHIPPED_STABILISERS, Lifelong

    for path in (SHIPPED, SHIPPED_STABILISERS, SHIPPED_1000):
        data = json.loads(path.read_text())
        life = Lifelong.from_json(path)
        assert life.to_json() == data, path.name
        assert len(life.to_frame()) == len(data["table"]) and life.figure().data


def test_shipped_run_and_its_figure():
    """The shipped 500-edit run (docs/results/lifelong.md) loads, every method's last checkpoint measured every
    edit, and the figure draws the ratios that explode on a collapse (perplexity, ||dW||/||W||) on log axes."""
    from editkit.evaluation.lifelong import SHIPPED, load_results
    from editkit.figures.lifelong import LOG_PANELS, PANELS, lifelong_figure

    shipped = load_results(SHIPPED)
    assert set(shipped) == {"rome", "memit", "pmet", "alphaedit"}
    for res in shipped.values():
        assert res.complete and res.n == 500 and res.rows[-1]["measured"] == 500
    assert shipped["rome"].batch == 1 and shipped["memit"].batch == 25
    table = {r["method"]: r for r in final_table(shipped)}
    assert table["rome"]["collapsed_at"] is not None and table["alphaedit"]["collapsed_at"] is None
    fig = lifelong_figure({m: r.to_json() for m, r in shipped.items()})
    kinds = {PANELS[i]: fig.layout[f"yaxis{i + 1 if i else ''}"].type for i in range(len(PANELS))}
    assert {p for p, t in kinds.items() if t == "log"} == set(LOG_PANELS)


def test_shipped_stabiliser_run_and_its_figure():
    """The shipped 120-edit ROME run with and without the stabilisers (docs/results/lifelong.md): every run complete
    and measured on every edit at the end, the defaults collapsed and the stabilised variants not, each variant with
    its own label and its method's colour with a dash of its own in the figures."""
    from editkit.evaluation.lifelong import SHIPPED_STABILISERS, load_results, styled
    from editkit.figures.lifelong import layer_figure, lifelong_figure

    runs = load_results(SHIPPED_STABILISERS)
    assert set(runs) == {"rome", "rome+encore", "rome+nas"}
    for res in runs.values():
        assert res.complete and res.n == 120 and res.batch == 1 and res.rows[-1]["measured"] == 120
    assert runs["rome+encore"].hparams["v_stop_top1"] == 2 and runs["rome+nas"].hparams["nas_anchor"] > 0
    # the label says what ran: ENCORE's early stop with editkit's shift bound (ENCORE's own bound is on the update)
    assert runs["rome+encore"].label == "ROME + early stop and shift bound (v_stop_top1 2, b 3.3)"
    table = {r["method"]: r for r in final_table(runs)}
    assert table["rome"]["collapsed_at"] is not None
    assert table["rome+encore"]["collapsed_at"] is None and table["rome+nas"]["collapsed_at"] is None
    data = {m: r.to_json() for m, r in styled(runs).items()}
    for fig in (lifelong_figure(data), layer_figure(data)):
        shown = {t.name: (t.line.color, t.line.dash) for t in fig.data if t.showlegend}
        assert len(shown) == 3 and len(set(shown.values())) == 3, shown  # told apart by dash
        assert len({color for color, _ in shown.values()}) == 1, shown  # ROME's family: ROME's colour


def test_shipped_1000_edit_run_and_its_conclusion():
    """The shipped 1,000-edit run (docs/results/lifelong.md): every method that edits in batches, the complete
    runs measured every edit at the end, the stabilised variants carry their settings, a run stopped early
    says so (incomplete) and is named but not ranked, and the sentence compares the other runs at the last
    checkpoint all of them reached, not each at its own end."""
    from editkit.editing.methods import get, names
    from editkit.evaluation.lifelong import SHIPPED_1000, conclusion, load_results

    runs = load_results(SHIPPED_1000)
    # every method in the file is registered (a new method needs no 1,000-edit run to pass: the page says it has none)
    assert {r.method for r in runs.values()} <= set(names())
    assert all(get(r.method).batch for r in runs.values())  # ROME edits one at a time: not in a batch run
    assert all(r.batch == 100 and r.n == 1000 for r in runs.values())
    done = {m: r for m, r in runs.items() if r.complete}
    assert {"memit", "pmet", "ultraedit", "alphaedit"} <= set(done)
    assert all(r.rows[-1]["measured"] == 1000 for r in done.values())
    assert runs["memit+nas"].hparams["nas_anchor"] > 0 and runs["alphaedit+bound"].hparams["v_max_norm"] > 0
    encore = runs["memit+encore"]  # ENCORE's own terms, lambda_n chosen on counterfact-val
    assert encore.complete and encore.hparams["update_norm_lambda"] == 10 and encore.hparams["add_prev_edits"]
    stopped = {m: r for m, r in runs.items() if not r.complete}
    assert all(r.rows[-1]["edit"] < 1000 for r in stopped.values())
    sentence = conclusion(runs)
    assert "after 1,000 edits (the share" in sentence
    # every collapse is named, in order (the sentence named PMET's alone; co-edit's came at 900)
    assert sentence.startswith("PMET collapses first (by edit 500), then Co-edit (MEMIT + implied) (by edit 900).")
    assert all(f"{r.label} stopped after {r.rows[-1]['edit']:,} edits" in sentence for r in stopped.values())
    # a run stopped at 600 edits (as co-edit's was until 28 Nov 2026) is named, not ranked
    short = {**runs, "coedit": replace(runs["coedit"], complete=False, rows=runs["coedit"].rows[:6])}
    assert "Co-edit (MEMIT + implied) stopped after 600 edits and is not ranked" in conclusion(short)
    assert "after 600 edits (the last checkpoint all runs reached" in conclusion(
        {m: replace(r, complete=False) for m, r in short.items()})
    cut = {**runs, "memit": replace(runs["memit"], rows=runs["memit"].rows[:3])}
    assert "after 300 edits (the last checkpoint all runs reached" in conclusion(cut)
    assert "after 1,000 edits (the share" in conclusion({m: runs[m] for m in ("memit", "pmet")})


def test_lifelong_table_columns_read_as_words():
    """Edit & compare's lifelong tables name every measure for a reader (no JSON key such as perplexity_ratio)."""
    from editkit.evaluation.lifelong import SHIPPED_1000, load_results
    from editkit.figures.labels import readable

    (row,) = readable(final_table(load_results(SHIPPED_1000))[:1])
    raw = [k for k in row if k != "label" and ("_" in k or k == k.lower())]
    assert not raw, raw


def test_no_cache_and_its_earlier_name():
    """`evaluate --sequential --no-cache` starts over; `--fresh`, the earlier name, still means the same."""
    from editkit.cli import build_parser

    for flag in ("--no-cache", "--fresh"):
        assert build_parser().parse_args(["evaluate", "--sequential", flag]).no_cache
    assert not build_parser().parse_args(["evaluate", "--sequential"]).no_cache


def test_a_registered_method_without_a_shipped_run_is_named_not_failed():
    """A method registered after the shipped file was made (here a copy of MEMIT under a new name) passes the
    shipped-run checks and is named by the sentence the page shows under the run."""
    from editkit.editing.methods import get, register, unregister
    from editkit.evaluation.lifelong import SHIPPED_1000, load_results, without_run

    runs = load_results(SHIPPED_1000)
    assert without_run(runs, batch_only=True) == ""
    register(replace(get("memit"), name="newedit", label="NewEdit"))
    try:
        sentence = without_run(runs, batch_only=True)
        assert sentence.startswith("NewEdit has no run in this file") and "--methods newedit" in sentence
        assert "ROME" not in sentence and "ROME" in without_run(runs)  # ROME edits one at a time
    finally:
        unregister("newedit")


def test_lifelong_merge_rebuilds_a_stopped_run_from_its_checkpoint(tmp_path, monkeypatch):
    """benchmarks/lifelong_merge.py (how the shipped 1,000-edit file was joined): a run stopped after its first batch
    is rebuilt from its checkpoint file (or a --dump-rows file) with a finished run's settings: its rows as
    measured, marked incomplete, its own hyperparameters; the finished run reads back as saved."""
    import subprocess
    import sys

    from editkit.evaluation.lifelong import Lifelong, load_results

    lm = load_model("tiny-gpt2", device="cpu")
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))
    records = load_eval_set("counterfact-first5", 4)
    spec = SequentialSpec(batch=2, sample=None, ppl_tokens=64, fluency_prompts=("The city",), fluency_tokens=4)
    done = sequential(lm, "memit", records, spec=spec)
    stopped = sequential(lm, "memit", records, {"nas_anchor": 2.0}, replace(spec, stop_after=1))
    saved = tmp_path / "memit.json"
    saved.write_text(json.dumps(Lifelong.of({"memit": done}, "counterfact-first5").to_json()))
    merge = [sys.executable, str(Path(__file__).resolve().parent.parent / "benchmarks" / "lifelong_merge.py")]
    env = {**os.environ, "EDITKIT_CACHE": str(tmp_path / "cache")}
    subprocess.run([*merge, "--dump-rows", str(tmp_path / "rows.json")], check=True, env=env, capture_output=True)
    name = Path(stopped.checkpoint).name
    for source in (stopped.checkpoint, f"{tmp_path / 'rows.json'}#{name}"):
        out = tmp_path / "merged.json"
        subprocess.run([*merge, str(out), f"memit={saved}", "--set", "counterfact-first5", "--partial",
                        f'memit+nas={source}:memit:{{"nas_anchor": 2.0}}', "--label", "memit+nas=MEMIT + NAS"],
                       check=True, env=env, capture_output=True)
        runs = load_results(out)
        assert runs["memit"].rows == done.rows and runs["memit"].complete
        part = runs["memit+nas"]
        assert not part.complete and part.rows == stopped.rows and part.batches_done == 1
        assert part.hparams["nas_anchor"] == 2.0 and part.label == "MEMIT + NAS"
    again = tmp_path / "again.json"  # a run added to a merged file: the file's runs are taken back by FILE#KEY
    subprocess.run([*merge, str(again), f"memit+nas={out}#memit+nas", f"plain={saved}", "--set",
                    "counterfact-first5"], check=True, env=env, capture_output=True)
    both = load_results(again)
    assert list(both) == ["memit+nas", "plain"] and both["memit+nas"] == runs["memit+nas"]
    assert both["plain"].rows == done.rows
