"""editkit on the peer comparison's tasks (common.py), in editkit's own environment (PYTHONPATH=the checkout)."""
import os
import sys

import editkit  # isort: skip - first, before torch (OpenMP's spin count)

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FOLDER, LAYER, OUT, PROMPT, PROMPTS, SAMPLES, SEED, SUBJECT, Timer, finish  # noqa: E402

R: dict = {}
out: dict = {"load_average_at_start": [round(x, 2) for x in os.getloadavg()], "threads": torch.get_num_threads()}
with Timer("load_object", R):
    # load
    model = AutoModelForCausalLM.from_pretrained(FOLDER)
    tok = AutoTokenizer.from_pretrained(FOLDER)
    lm = editkit.load(model, tok)
    # end load
with Timer("activations", R):
    # activations
    acts = editkit.activations(lm, PROMPTS, [f"resid_pre.{LAYER}", f"attn_out.{LAYER}", f"mlp_out.{LAYER}"])
    # end activations
out["shapes"] = {s: list(acts[s].shape) for s in acts.sites}
with Timer("batch_predict", R):
    # predict
    top = [p.top.token for p in editkit.predict(lm, PROMPTS, k=1)]
    # end predict
out["top"] = top
with Timer("trace_mlp_panel", R):
    # trace
    tr = editkit.trace(lm, PROMPT, SUBJECT, kind="mlp", samples=SAMPLES, seed=SEED, cache=False, progress=False)
    # end trace
out["trace_cells"] = len(tr.scores) * len(tr.scores[0])
out["trace_peak"] = tr.peak()
out["noise_scale"] = tr.noise_scale
with Timer("cell_by_hand", R):
    # cell
    t, layer, score = tr.peak()
    b, e = tr.subject_range
    L, d = lm.adapter.n_layers, lm.adapter.d_model
    noise = torch.from_numpy(np.random.RandomState(tr.seed).randn(tr.samples, e - b, d)).float() * tr.noise_scale
    window = range(max(0, layer - tr.window // 2), min(L, layer - (-tr.window // 2)))
    clean = editkit.activations(lm, PROMPT, [f"mlp_out.{j}" for j in window])
    with editkit.intervene(lm) as iv:
        iv.add("embed", noise, positions=range(b, e))
        for j in window:
            iv.patch(f"mlp_out.{j}", clean[f"mlp_out.{j}"][0, t], positions=t)
        p = float(editkit.activations(lm, [PROMPT] * tr.samples, []).probs(tr.answer_id).mean())
    # end cell
out["cell"] = {"by_hand": p, "trace": score, "diff": abs(p - score)}
rows = [e - 1, len(tr.tokens) - 1]  # the last subject token and the last token: the rows the peers compute
with Timer("rows_by_hand", R):
    # rows
    clean = editkit.activations(lm, PROMPT, "mlp_out.*")
    scores = np.zeros((len(tr.tokens), L))
    for t in rows:
        for layer in range(L):
            with editkit.intervene(lm) as iv:
                iv.add("embed", noise, positions=range(b, e))
                for j in range(max(0, layer - 5), min(L, layer + 5)):
                    iv.patch(f"mlp_out.{j}", clean[f"mlp_out.{j}"][0, t], positions=t)
                run = editkit.activations(lm, [PROMPT] * tr.samples, [])
            scores[t, layer] = float(run.probs(tr.answer_id).mean())
    # end rows
panel = np.array(tr.scores)
out["rows"] = rows
out["cells"] = len(rows) * L
out["rows_max_abs_diff_vs_trace"] = float(np.abs(scores[rows] - panel[rows]).max())
OUT.mkdir(parents=True, exist_ok=True)
np.save(OUT / "editkit_mlp_panel.npy", panel)
out["seconds"] = R
finish("editkit", out, __file__, ("load", "activations", "predict", "trace", "cell", "rows"))
