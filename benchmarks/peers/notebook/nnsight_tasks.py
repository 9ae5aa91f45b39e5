"""nnsight (0.8) on the peer comparison's tasks (common.py), in the peers' venv."""
import os
import sys

import numpy as np
import torch
from nnsight import LanguageModel
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FOLDER, LAYER, OUT, PROMPT, PROMPTS, SAMPLES, SEED, SUBJECT, Timer, finish, reference  # noqa: E402

R: dict = {}
out: dict = {"load_average_at_start": [round(x, 2) for x in os.getloadavg()], "threads": torch.get_num_threads()}
with Timer("load_object", R):
    # load
    model = AutoModelForCausalLM.from_pretrained(FOLDER)
    tok = AutoTokenizer.from_pretrained(FOLDER)
    lm = LanguageModel(model, tokenizer=tok)
    # end load
with Timer("activations", R):
    # activations
    with lm.trace(PROMPTS):
        resid = lm.model.layers[LAYER].input.save()
        attn = lm.model.layers[LAYER].self_attn.output[0].save()
        mlp = lm.model.layers[LAYER].mlp.output.save()
    # end activations
out["shapes"] = [list(resid.shape), list(attn.shape), list(mlp.shape)]
out["padding_side"] = tok.padding_side
with Timer("batch_predict", R):
    # predict
    with lm.trace(PROMPTS):
        logits = lm.lm_head.output.save()
    mask = tok(PROMPTS, return_tensors="pt", padding=True)["attention_mask"]
    last = logits[torch.arange(len(PROMPTS)), -1] if tok.padding_side == "left" else \
        logits[torch.arange(len(PROMPTS)), mask.sum(1) - 1]
    top = [tok.decode(int(i)) for i in last.argmax(-1)]
    # end predict
out["top"] = top
scale = reference()["noise_scale"]
with Timer("trace_rows", R):
    # trace
    ids = tok(PROMPT, return_tensors="pt")
    offsets = tok(PROMPT, return_offsets_mapping=True)["offset_mapping"]
    c0 = PROMPT.index(SUBJECT)
    c1 = c0 + len(SUBJECT)
    subj = [i for i, (a, b) in enumerate(offsets) if b > a and a < c1 and b > c0]
    b, e = subj[0], subj[-1] + 1
    T, L, d = ids["input_ids"].shape[1], len(lm.model.layers), model.config.hidden_size
    noise = torch.from_numpy(np.random.RandomState(SEED).randn(SAMPLES, e - b, d)).float() * scale
    with lm.trace(PROMPT):
        clean = torch.stack([lm.model.layers[j].mlp.output[0] for j in range(L)]).save()
        clean_logits = lm.lm_head.output[0, -1].save()
    answer = int(clean_logits.argmax())
    scores = np.zeros((T, L))
    rows = [e - 1, T - 1]  # the last subject token and the last token
    for t in rows:
        for layer in range(L):
            with lm.trace([PROMPT] * SAMPLES):
                lm.model.embed_tokens.output[:, b:e] += noise
                for j in range(max(0, layer - 5), min(L, layer + 5)):
                    lm.model.layers[j].mlp.output[:, t] = clean[j, t]
                p = lm.lm_head.output[:, -1].softmax(-1)[:, answer].mean().save()
            scores[t, layer] = float(p.detach())
    # end trace
mine = np.load(OUT / "editkit_mlp_panel.npy")
out["rows"] = rows
out["cells"] = len(rows) * L
out["rows_max_abs_diff_vs_editkit"] = float(np.abs(scores[rows] - mine[rows]).max())
out["seconds"] = R
finish("nnsight", out, __file__, ("load", "activations", "predict", "trace"))
