"""Export: the edited model leaves editkit as a Hugging Face folder and a GGUF file and comes back the same.

The round trip is the test: a ROME edit of tiny-llama, exported, loaded with plain transformers (the folder)
and with editkit's own loader (the GGUF); the edited prompt's top token is the new target and P(new) equals
the in-process edited model's (exactly for the folder and f32; f16 and q8_0 within the tolerances the manual
states). The embedded model's round trip is in the full tier (test_export_embedded.py)."""
import json
import os

import pytest
import torch

from editkit.cli import main
from editkit.core.errors import EditkitError
from editkit.evaluation.report import edit_report
from editkit.model import gguf_export
from editkit.model.export import Provenance
from editkit.model.loading import load_model
from editkit.model.scoring import score_targets
from editkit.model.weights import applied, save_patch

# the subject ends the prompt: ROME's edit at its last token reaches the prediction on a random 4-layer model
REQUEST = {"prompt": "The mother tongue of {}", "subject": "Danielle Darrieux", "target_new": "war"}
PROMPT = "The mother tongue of Danielle Darrieux"
# |log P_gguf(new) - log P_in-process(new)|, the bound the manual states (docs/tutorials/export.md): measured
# 1.7e-4 (f16) and 3.8e-3 (q8_0) on tiny-llama, 1.1e-4 and 9.0e-4 on Gemma 3 270M
TOLERANCE = {"f16": 0.005, "q8_0": 0.02}


@pytest.fixture(scope="module")
def edited():
    lm = load_model("tiny-llama", device="cpu")  # its own copy: a test below changes its config
    return lm, edit_report(lm, "rome", REQUEST)


def _top_and_p(lm, tok=None, model=None):
    """(top next token id after PROMPT, P(new)) from editkit's scoring, or from a plain transformers model."""
    if model is None:
        from editkit.model.text import top_k

        return top_k(lm, PROMPT, 1)[0].token_id, score_targets(lm, [PROMPT], [" war"])[0].prob
    ids = tok(PROMPT + " war", return_tensors="pt")["input_ids"]
    n = len(tok(PROMPT)["input_ids"])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].double(), -1)
    target = sum(logp[n - 1 + j, ids[0, n + j]] for j in range(ids.shape[1] - n))
    return int(logp[n - 1].argmax()), float(target.exp())


def test_hf_folder_loads_with_plain_transformers(edited, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lm, ed = edited
    with applied(lm, ed.delta):
        top, p_in = _top_and_p(lm)
        top_plain, p_plain = _top_and_p(lm, lm.tok, lm.model)
    assert lm.tok.decode([top]) == " war"
    out = ed.export_hf(tmp_path / "edited")
    with applied(lm, ed.delta):
        from editkit.model.weights import effective_state

        assert out.tensors == len(effective_state(lm)) > 0  # counted in the files written (untied head)
    model = AutoModelForCausalLM.from_pretrained(out.path)
    tok = AutoTokenizer.from_pretrained(out.path)
    assert (top_plain, p_plain) == _top_and_p(None, tok, model)  # bit for bit: same weights, same computation
    assert abs(p_plain - p_in) < 1e-6
    saved = model.state_dict()
    with applied(lm, ed.delta):
        from editkit.model.weights import effective_state

        assert all(torch.equal(t, saved[k]) for k, t in effective_state(lm).items())
    meta = json.loads((tmp_path / "edited" / "editkit-edit.json").read_text())
    assert meta["base"] == "tiny-llama" and meta["method"] == "rome" and meta["requests"][0]["subject"] == \
        "Danielle Darrieux"


def test_gguf_round_trip_through_editkits_loader(edited, tmp_path, monkeypatch):
    from gguf import GGUFReader

    lm, ed = edited
    with applied(lm, ed.delta):
        p_in = _top_and_p(lm)[1]
    files = {kind: ed.export_gguf(tmp_path / f"edited-{kind}.gguf", kind) for kind in ("f32", "f16", "q8_0")}
    sizes = {k: f.bytes for k, f in files.items()}
    assert sizes["q8_0"] < sizes["f16"] < sizes["f32"]
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))  # the conversion's cache, not the shared one
    for kind, f in files.items():
        back = load_model(f.path, device="cpu")
        top_back, p_back = _top_and_p(back)
        assert back.tok.decode([top_back]) == " war"
        if kind == "f32":
            assert p_back == p_in
            assert all(torch.equal(t, back.model.state_dict()[k]) for k, t in _edited_state(lm, ed).items())
        else:
            assert abs(torch.tensor(p_back).log() - torch.tensor(p_in).log()) < TOLERANCE[kind], kind
    fields = GGUFReader(files["f32"].path).fields
    assert fields["editkit.base_model"].contents() == "tiny-llama"
    assert fields["editkit.method"].contents() == "rome"
    assert json.loads(fields["editkit.requests"].contents())[0]["target_new"].strip() == "war"
    assert fields["general.architecture"].contents() == "llama"


def _edited_state(lm, ed):
    from editkit.model.weights import effective_state

    with applied(lm, ed.delta):
        return effective_state(lm)


def test_norm_shift_and_tied_head_round_trip_exactly(tiny_by_name, tmp_path):
    """Llama's interleaved q/k rows and a tied head come back bit for bit; Gemma's norms as 1 + w too."""
    from transformers import AutoModelForCausalLM

    lm = tiny_by_name("tiny-llama-tied")
    prov = Provenance(lm.name, "none")
    gguf_export.export_gguf(lm, tmp_path / "tied.gguf", prov)
    back = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tied.gguf")
    assert back.config.tie_word_embeddings and all(torch.equal(t, back.state_dict()[k])
                                                   for k, t in lm.model.state_dict().items())
    # Gemma's norm weights came from a GGUF as w = g - 1 (float32): a stored s with s - 1 == w exists for each
    notes: list = []
    g = (torch.rand(10000) * 3 + 0.01).numpy()
    w = g - 1
    s = gguf_export._plus_one(w, "n", notes)
    assert ((s - 1) == w).all() and not notes
    finer = torch.tensor([1e-12, 0.3 + 2 ** -30]).numpy()  # finer than float32's 1 + w holds
    gguf_export._plus_one(finer, "n", notes)
    assert notes and "cannot be stored exactly" in notes[0]


def test_refused_before_any_file_is_written(edited, tiny_by_name, tmp_path):
    ed = edited[1]
    # what a page asks before offering GGUF at all (the export itself raises the same sentence)
    assert "supports" in gguf_export.refusal(tiny_by_name("tiny-gpt2"), True)
    assert "needs the GGUF" in gguf_export.refusal(tiny_by_name("tiny-gemma3"), False)
    assert gguf_export.refusal(tiny_by_name("tiny-gemma3"), True) is None
    assert gguf_export.refusal(edited[0], False) is None
    with pytest.raises(EditkitError, match="supports"):
        gguf_export.export_gguf(tiny_by_name("tiny-gpt2"), tmp_path / "a.gguf", Provenance("tiny-gpt2", "x"))
    with pytest.raises(EditkitError, match="needs the GGUF it was loaded from"):
        gguf_export.export_gguf(tiny_by_name("tiny-gemma3"), tmp_path / "b.gguf", Provenance("g", "x"))
    with pytest.raises(EditkitError, match="type must be one of"):
        ed.export_gguf(tmp_path / "x.gguf", "q4_k")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(EditkitError, match="not an empty folder"):
        ed.export_hf(tmp_path / "full")
    with pytest.raises(EditkitError, match="base model's files"):
        from editkit.core.paths import cache_dir

        ed.export_gguf(cache_dir("models") / "over.gguf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"]
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


def test_a_failed_export_leaves_nothing(edited, tmp_path, monkeypatch):
    lm, ed = edited

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(gguf_export, "_encode", broken)
    with pytest.raises(EditkitError, match="disk full.*nothing was left behind"):  # one line, no traceback
        ed.export_gguf(tmp_path / "half.gguf")
    monkeypatch.setattr(lm.tok, "save_pretrained", broken)
    with pytest.raises(EditkitError, match="disk full"):
        ed.export_hf(tmp_path / "half")
    assert list(tmp_path.iterdir()) == []  # no target, no temporary file or folder


def test_config_the_gguf_cannot_carry_is_refused(edited, tmp_path, monkeypatch):
    """A config key transformers' GGUF reader would not rebuild (here attention biases) makes the file another
    model: refused before the file is written."""
    lm, _ = edited
    monkeypatch.setattr(lm.model.config, "attention_bias", True)
    with pytest.raises(EditkitError, match="attention_bias"):
        gguf_export.export_gguf(lm, tmp_path / "x.gguf", Provenance(lm.name, "x"))
    assert list(tmp_path.iterdir()) == []


def test_cli_export_from_a_patch(edited, tmp_path, capsys):
    lm, ed = edited
    patch = save_patch(tmp_path / "p", ed.delta, {"model": lm.name, "method": "rome", "requests": [REQUEST]})
    assert main(["export", "--model", "tiny-llama", "--patch", str(patch), "--hf", str(tmp_path / "hf"),
                 "--gguf", str(tmp_path / "m.gguf"), "--type", "q8_0", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["format"] for r in rows] == ["hf", "gguf"] and rows[1]["type"] == "q8_0"
    assert os.path.getsize(tmp_path / "m.gguf") == rows[1]["bytes"]
    assert main(["export", "--model", "tiny-llama-tied", "--patch", str(patch), "--gguf",
                 str(tmp_path / "n.gguf")]) == 2
    assert "made on tiny-llama" in capsys.readouterr().err
    assert not (tmp_path / "n.gguf").exists()


def _run(capsys, *argv):
    code = main(list(argv))
    err = capsys.readouterr().err
    return code, err


def test_cli_bad_targets_are_one_line_and_nothing_is_overwritten(edited, tmp_path, capsys, monkeypatch):
    """An existing file, a folder, a wrong name, --type without --gguf: a one-line error before the model
    loads, and the user's file as it was; --overwrite replaces a GGUF on purpose."""
    lm, ed = edited
    patch = str(save_patch(tmp_path / "p", ed.delta, {"model": lm.name, "method": "rome", "requests": [REQUEST]}))
    mine = tmp_path / "mine.gguf"
    mine.write_text("mine")
    (tmp_path / "folder").mkdir()
    export = ["export", "--model", "tiny-llama", "--patch", patch]
    for extra, message in (
            (["--gguf", str(mine)], "already exists; give another name, or replace it with --overwrite"),
            (["--gguf", str(tmp_path / "folder")], "is a folder"),
            (["--gguf", str(tmp_path / "x.bin")], "ending in .gguf"),
            (["--hf", str(tmp_path / "hf"), "--type", "f16"], "--type sets a GGUF file's weights"),
            (["--gguf", str(tmp_path / "no" / "x.gguf")], "does not exist")):
        code, err = _run(capsys, *export, *extra)
        assert code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert mine.read_text() == "mine"
    assert _run(capsys, *export, "--gguf", str(mine), "--overwrite")[0] == 0
    assert mine.read_bytes()[:4] == b"GGUF"
    monkeypatch.setattr(os, "access", lambda *args, **kwargs: False)  # a read-only folder, even for root
    code, err = _run(capsys, *export, "--gguf", str(tmp_path / "y.gguf"))
    assert code == 2 and "is not writable" in err and not (tmp_path / "y.gguf").exists()


def test_cli_report_target_checked_before_the_edits(tmp_path, capsys):
    """A report to a folder or onto an existing file is refused before any model loads or method runs."""
    requests = tmp_path / "r.json"
    requests.write_text(json.dumps([REQUEST]))
    mine = tmp_path / "mine.html"
    mine.write_text("mine")
    report = ["report", "--model", "tiny-llama", "--requests", str(requests), "--methods", "rome", "--n-gen", "0"]
    for out, message in ((tmp_path, "is a folder"), (mine, "already exists")):
        code, err = _run(capsys, *report, "--out", str(out))
        assert code == 2 and message in err and "loaded" not in err, err
    code, err = _run(capsys, "edit", "--model", "tiny-llama", "--method", "rome", "--requests", str(requests),
                     "--report", str(mine))
    assert code == 2 and "already exists" in err and mine.read_text() == "mine"
    assert _run(capsys, *report, "--out", str(mine), "--overwrite")[0] == 0
    assert mine.read_text().startswith("<!DOCTYPE html>")


def test_q8_0_says_which_matrices_stay_f16():
    """Rows not a multiple of 32 values cannot be q8_0 blocks: such a matrix is stored f16 and a note says so."""
    plan = gguf_export.Plan("llama")
    plan.tensors = [gguf_export._param("blk.0.ffn_up.weight", "up", torch.zeros(64, 40), "q8_0"),
                    gguf_export._param("blk.0.ffn_down.weight", "down", torch.zeros(40, 64), "q8_0"),
                    gguf_export._param("blk.0.attn_norm.weight", "norm", torch.zeros(40), "q8_0")]
    notes = gguf_export._kept_f16(plan, "q8_0")
    assert len(notes) == 1 and notes[0].startswith("1 matrix stays f16") and "ffn_up" in notes[0]
    assert gguf_export._kept_f16(plan, "f16") == []
