"""Context templates: short prefixes the model writes itself, so an edit generalizes across contexts
(ROME Sec. 3.1, `get_context_templates`; MEMIT's starters "The", "Therefore", "Because", "I", "You")."""
from __future__ import annotations

import time

import torch

from ..core.cache import Store
from ..core.progress import eta
from ..model.text import sample
from ..model.weights import unedited

STARTERS = ("The", "Therefore", "Because", "I", "You")
TEMPLATES = Store("templates", version=2)  # 2: private seeded streams (text.sample), base weights


@torch.no_grad()
def context_templates(lm, n: int = 5, length: int = 10, seed: int = 0, progress=None) -> list[str]:
    """["{}"] + n prefixes "<generated text>. {}", sampled (top-k 5) and cached per model."""
    return TEMPLATES.get_or_build(TEMPLATES.path(lm.name, n=n, length=length, seed=seed),
                                  lambda: _generate(lm, n, length, seed, progress))


def templates_cached(lm, n: int = 5, length: int = 10, seed: int = 0) -> bool:
    """Whether the templates are cached (`lm`: the model or its name)."""
    return TEMPLATES.get(TEMPLATES.path(getattr(lm, "name", lm), n=n, length=length, seed=seed)) is not None


def _generate(lm, n: int, length: int, seed: int, progress=None) -> list[str]:
    """Sampled on the base weights (ROME and MEMIT draw the templates once, from the unedited model), each from its
    own seeded stream (text.sample), so concurrent sessions get the same templates."""
    templates = ["{}"]
    start = time.perf_counter()
    with unedited():
        for i in range(n):
            text = STARTERS[i % len(STARTERS)] + sample(lm, STARTERS[i % len(STARTERS)], length, seed=seed + i,
                                                        top_k=5, min_new_tokens=length)
            templates.append(text.replace("{", " ").replace("}", " ").strip() + ". {}")
            if progress:
                progress((i + 1) / n, f"context templates: {i + 1}/{n}, {eta(time.perf_counter() - start, i + 1, n)}")
    return templates
