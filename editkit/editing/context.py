"""Context templates: short prefixes the model writes itself, so an edit generalizes across contexts
(ROME Sec. 3.1, `get_context_templates`; MEMIT's starters "The", "Therefore", "Because", "I", "You")."""
from __future__ import annotations

import json

import torch

from ..paths import cache_dir, safe_name

STARTERS = ("The", "Therefore", "Because", "I", "You")


@torch.no_grad()
def context_templates(lm, n: int = 5, length: int = 10, seed: int = 0) -> list[str]:
    """["{}"] + n prefixes "<generated text>. {}", sampled (top-k 5) and cached per model."""
    path = cache_dir("templates") / f"{safe_name(lm.name)}-{n}-{length}-{seed}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    templates = ["{}"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for i in range(n):
            batch = lm.tok(STARTERS[i % len(STARTERS)], return_tensors="pt", add_special_tokens=True).to(lm.device)
            out = lm.model.generate(**batch, do_sample=True, top_k=5, top_p=1.0, temperature=1.0,
                                    max_new_tokens=length, min_new_tokens=length,
                                    pad_token_id=lm.tok.pad_token_id)
            text = lm.tok.decode(out[0], skip_special_tokens=True)
            templates.append(text.replace("{", " ").replace("}", " ").strip() + ". {}")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(templates))
    tmp.replace(path)
    return templates
