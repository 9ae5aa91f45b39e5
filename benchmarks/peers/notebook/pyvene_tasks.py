"""pyvene (0.1.8) on the peer comparison's tasks (common.py), in the peers' venv."""
import os
import sys

import numpy as np
import pyvene as pv
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FOLDER, LAYER, OUT, PROMPT, PROMPTS, SAMPLES, SEED, SUBJECT, Timer, finish, reference  # noqa: E402

R: dict = {}
out: dict = {"load_average_at_start": [round(x, 2) for x in os.getloadavg()], "threads": torch.get_num_threads()}
with Timer("load_object", R):
    # load
    model = AutoModelForCausalLM.from_pretrained(FOLDER)
    tok = AutoTokenizer.from_pretrained(FOLDER)
    # end load
with Timer("activations", R):
    # activations
    config = [{"layer": LAYER, "component": c, "intervention": pv.CollectIntervention(keep_last_dim=True)}
              for c in ("block_input", "attention_output", "mlp_output")]  # keep_last_dim: every position
    collector = pv.IntervenableModel(config, model=model)
    batch = tok(PROMPTS, return_tensors="pt", padding=True)
    T = batch["input_ids"].shape[1]
    (_, collected), _ = collector(base=batch, unit_locations={"base": [[list(range(T))] * len(PROMPTS)] * 3})
    # end activations
out["shapes"] = [list(torch.as_tensor(c).shape) if isinstance(c, torch.Tensor) else len(c) for c in collected]
with Timer("batch_predict", R):
    # predict
    with torch.no_grad():
        logits = model(**batch).logits
    last = batch["attention_mask"].sum(1) - 1
    top = [tok.decode(int(i)) for i in logits[torch.arange(len(PROMPTS)), last].argmax(-1)]
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
    T, L, d = ids["input_ids"].shape[1], model.config.num_hidden_layers, model.config.hidden_size
    noise = torch.from_numpy(np.random.RandomState(SEED).randn(SAMPLES, e - b, d)).float() * scale

    class Noise(pv.ConstantSourceIntervention):
        def forward(self, base, source=None, subspaces=None):
            base = base.clone()
            base[:, b:e] += noise.to(base.dtype)
            return base

    with torch.no_grad():
        answer = int(model(**ids).logits[0, -1].argmax())
    batch_n = {k: v.repeat(SAMPLES, 1) for k, v in ids.items()}
    scores = np.zeros((T, L))
    rows = [e - 1, T - 1]  # the last subject token and the last token
    for t in rows:
        for layer in range(L):
            window = list(range(max(0, layer - 5), min(L, layer + 5)))
            config = pv.IntervenableConfig(
                [{"layer": 0, "component": "block_input", "intervention": Noise(keep_last_dim=True), "unit": "pos",
                  "max_number_of_units": T, "group_key": 0}]
                + [{"layer": j, "component": "mlp_output", "intervention_type": pv.VanillaIntervention,
                    "group_key": 1} for j in window])
            iv = pv.IntervenableModel(config, model=model)
            with torch.no_grad():
                _, patched = iv(base=batch_n, sources=[None, ids],
                                unit_locations={"sources->base": ([None] + [[[t]]] * len(window),
                                                                  [[list(range(T))] * SAMPLES]
                                                                  + [[[t]] * SAMPLES] * len(window))})
            scores[t, layer] = float(patched.logits[:, -1].softmax(-1)[:, answer].mean())
    # end trace
mine = np.load(OUT / "editkit_mlp_panel.npy")
out["rows"] = rows
out["cells"] = len(rows) * L
out["rows_max_abs_diff_vs_editkit"] = float(np.abs(scores[rows] - mine[rows]).max())
out["seconds"] = R
finish("pyvene", out, __file__, ("load", "activations", "predict", "trace"))
