"""The export round trip on the embedded model (full tier): a ROME edit of Gemma 3 270M written as a Hugging Face
folder and as GGUF f32, f16 and q8_0; the folder loaded with plain transformers, each GGUF with editkit's loader;
the edited prompt's top token is the new target, P(new) equals the in-process edited model's (exactly for the
folder and f32, within the stated tolerances for f16 and q8_0), the metadata names the edit, and the base model's
files are byte for byte what they were."""
import hashlib
import json
import math

import pytest
import torch

from editkit.model.export import source_gguf
from editkit.model.loading import MODELS, load_model
from editkit.model.scoring import score_targets
from editkit.model.text import top_k
from editkit.model.weights import applied, effective_state

REQUEST = {"prompt": "The {} is in downtown", "subject": "Space Needle", "target_new": "Chicago",
           "target_true": "Seattle"}
PROMPT, TARGET = "The Space Needle is in downtown", " Chicago"
TOLERANCE = {"f16": 0.005, "q8_0": 0.02}  # |log P_gguf - log P_in-process|, as in tests/test_export.py


def _base_files(lm) -> list:
    """Every file of the base model: its cached folder and its source GGUF (listed before the test points
    EDITKIT_CACHE elsewhere, so the same files are hashed after)."""
    return sorted(p for p in MODELS.path(lm.name, suffix="").rglob("*") if p.is_file()) + [source_gguf(lm)]


def _digests(files: list) -> dict:
    """sha256 of each file."""
    out = {}
    for f in files:
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                h.update(block)
        out[str(f)] = h.hexdigest()
    return out


@pytest.mark.full
def test_gemma_round_trip(gemma, tmp_path, monkeypatch):
    from gguf import GGUFReader
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import editkit

    files = _base_files(gemma)
    before = _digests(files)
    ed = editkit.edit(gemma, "rome", REQUEST)
    with applied(gemma, ed.delta):
        p_in = score_targets(gemma, [PROMPT], [TARGET])[0].prob
        assert top_k(gemma, PROMPT, 1)[0].token == TARGET
        state = {k: v.clone() for k, v in effective_state(gemma).items()}
        ids = gemma.tok(PROMPT, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits_in = gemma.model(ids).logits[0, -1]
    folder = ed.export_hf(tmp_path / "hf")
    model = AutoModelForCausalLM.from_pretrained(folder.path)
    tok = AutoTokenizer.from_pretrained(folder.path)
    assert tok(PROMPT)["input_ids"] == gemma.tok(PROMPT)["input_ids"]
    with torch.no_grad():
        assert torch.equal(model(ids).logits[0, -1], logits_in)  # plain transformers, the same numbers
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    del model
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cache"))  # the GGUF conversions' cache
    for kind in ("f32", "f16", "q8_0"):
        f = ed.export_gguf(tmp_path / f"gemma-{kind}.gguf", kind)
        assert f.notes == []
        back = load_model(f.path, device="cpu")
        assert top_k(back, PROMPT, 1)[0].token == TARGET
        p = score_targets(back, [PROMPT], [TARGET])[0].prob
        if kind == "f32":
            assert p == p_in
            assert all(torch.equal(v, back.model.state_dict()[k]) for k, v in state.items())
        else:
            assert abs(math.log(p) - math.log(p_in)) < TOLERANCE[kind], (kind, p, p_in)
        del back
    fields = GGUFReader(tmp_path / "gemma-q8_0.gguf").fields
    assert fields["general.architecture"].contents() == "gemma3"
    assert fields["editkit.base_model"].contents() == "gemma-3-270m"
    assert json.loads(fields["editkit.requests"].contents())[0]["subject"] == "Space Needle"
    assert len(fields["tokenizer.ggml.tokens"].data) == 262144  # the source's tokenizer, carried over
    assert _digests(files) == before
