"""TransformerLens (TransformerBridge, 4.x) on the peer comparison's tasks (common.py), in the peers' venv."""
import os
import sys

import numpy as np
import torch
from transformer_lens.model_bridge import TransformerBridge
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import FOLDER, LAYER, OUT, PROMPT, PROMPTS, SAMPLES, SEED, SUBJECT, Timer, finish, reference  # noqa: E402

R: dict = {}
out: dict = {"load_average_at_start": [round(x, 2) for x in os.getloadavg()], "threads": torch.get_num_threads()}
with Timer("load_object", R):
    # load
    model = AutoModelForCausalLM.from_pretrained(FOLDER)
    tok = AutoTokenizer.from_pretrained(FOLDER)
    tl = TransformerBridge.boot_transformers(str(FOLDER), hf_model=model, tokenizer=tok)
    # end load
with Timer("activations", R):
    # activations
    names = [f"blocks.{LAYER}.hook_resid_pre", f"blocks.{LAYER}.hook_attn_out", f"blocks.{LAYER}.hook_mlp_out"]
    _, cache = tl.run_with_cache(PROMPTS, names_filter=lambda n: n in names)
    # end activations
out["shapes"] = {n: list(cache[n].shape) for n in names}  # TransformerLens prepends a BOS token by default
with Timer("batch_predict", R):
    # predict
    tokens = tl.to_tokens(PROMPTS)
    logits = tl(tokens)
    last = (tokens != tok.pad_token_id).sum(1) - 1
    top = [tok.decode(int(i)) for i in logits[torch.arange(len(PROMPTS)), last].argmax(-1)]
    # end predict
out["top"] = top
scale = reference()["noise_scale"]
with Timer("trace_rows", R):
    # trace
    ids = tl.to_tokens(PROMPT, prepend_bos=False)  # as the tokenizer has it (SmolLM2 adds no BOS), as editkit
    strs = tl.to_str_tokens(PROMPT, prepend_bos=False)
    text, spans = "", []
    for s in strs:
        spans.append((len(text), len(text) + len(s)))
        text += s
    c0 = text.index(SUBJECT)
    c1 = c0 + len(SUBJECT)
    subj = [i for i, (a, b) in enumerate(spans) if b > a and a < c1 and b > c0]
    b, e = subj[0], subj[-1] + 1
    T, L, d = ids.shape[1], tl.cfg.n_layers, tl.cfg.d_model
    noise = torch.from_numpy(np.random.RandomState(SEED).randn(SAMPLES, e - b, d)).float() * scale
    clean_logits, clean = tl.run_with_cache(ids, names_filter=lambda name: name.endswith("hook_mlp_out"))
    answer = int(clean_logits[0, -1].argmax())

    def corrupt(x, hook):
        x = x.clone()
        x[:, b:e] += noise
        return x

    def restore(x, hook, j, t):
        x = x.clone()
        x[:, t] = clean[f"blocks.{j}.hook_mlp_out"][0, t]
        return x

    scores = np.zeros((T, L))
    rows = [e - 1, T - 1]  # the last subject token and the last token
    for t in rows:
        for layer in range(L):
            hooks = [("hook_embed", corrupt)]
            for j in range(max(0, layer - 5), min(L, layer + 5)):
                hooks.append((f"blocks.{j}.hook_mlp_out", lambda x, hook, j=j, t=t: restore(x, hook, j, t)))
            with torch.no_grad():
                logits = tl.run_with_hooks(ids.repeat(SAMPLES, 1), fwd_hooks=hooks)
            scores[t, layer] = float(logits[:, -1].softmax(-1)[:, answer].mean())
    # end trace
mine = np.load(OUT / "editkit_mlp_panel.npy")
out["rows"] = rows
out["cells"] = len(rows) * L
out["rows_max_abs_diff_vs_editkit"] = float(np.abs(scores[rows] - mine[rows]).max())
out["seconds"] = R
finish("transformerlens", out, __file__, ("load", "activations", "predict", "trace"))
