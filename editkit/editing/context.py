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
    gen = torch.Generator().manual_seed(seed)
    for i in range(n):
        ids = lm.tok(STARTERS[i % len(STARTERS)], return_tensors="pt", add_special_tokens=True)["input_ids"]
        ids = ids.to(lm.device)
        for _ in range(length):
            logits = lm.model(input_ids=ids, use_cache=False).logits[0, -1].float()
            top = logits.topk(5)
            choice = top.indices[torch.multinomial(torch.softmax(top.values, -1).cpu(), 1, generator=gen)]
            ids = torch.cat([ids, choice.view(1, 1).to(ids.device)], 1)
        text = lm.tok.decode(ids[0], skip_special_tokens=True)
        templates.append(text.replace("{", " ").replace("}", " ").strip() + ". {}")
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(templates))
    tmp.replace(path)
    return templates
