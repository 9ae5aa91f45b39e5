"""Context templates: short prefixes the model writes itself, so an edit generalizes across contexts
(ROME Sec. 3.1, `get_context_templates`; MEMIT's starters "The", "Therefore", "Because", "I", "You")."""
from __future__ import annotations

import time

import torch

from ..cache import Store

STARTERS = ("The", "Therefore", "Because", "I", "You")
TEMPLATES = Store("templates", version=1)


@torch.no_grad()
def context_templates(lm, n: int = 5, length: int = 10, seed: int = 0, progress=None) -> list[str]:
    """["{}"] + n prefixes "<generated text>. {}", sampled (top-k 5) and cached per model."""
    return TEMPLATES.get_or_build(TEMPLATES.path(lm.name, n=n, length=length, seed=seed),
                                  lambda: _generate(lm, n, length, seed, progress))


def templates_cached(lm, n: int = 5, length: int = 10, seed: int = 0) -> bool:
    return TEMPLATES.get(TEMPLATES.path(lm.name, n=n, length=length, seed=seed)) is not None


@torch.no_grad()
def _generate(lm, n: int, length: int, seed: int, progress=None) -> list[str]:
    from .stats import eta

    templates = ["{}"]
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for i in range(n):
            batch = lm.tok(STARTERS[i % len(STARTERS)], return_tensors="pt", add_special_tokens=True).to(lm.device)
            out = lm.model.generate(**batch, do_sample=True, top_k=5, top_p=1.0, temperature=1.0,
                                    max_new_tokens=length, min_new_tokens=length,
                                    pad_token_id=lm.tok.pad_token_id)
            text = lm.tok.decode(out[0], skip_special_tokens=True)
            templates.append(text.replace("{", " ").replace("}", " ").strip() + ". {}")
            if progress:
                progress((i + 1) / n, f"context templates: {i + 1}/{n}, {eta(time.perf_counter() - start, i + 1, n)}")
    return templates
