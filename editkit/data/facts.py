"""ROME's known facts (assets/data/known_1000.json, MIT) and the subset a given model itself knows.

Causal-tracing averages and PMET's similarity curves are computed over facts the model predicts, as in ROME:
a fact counts as known when the model's greedy continuation of the prompt starts with the attribute.
"""
from __future__ import annotations

import json
from functools import lru_cache

import torch

from ..core.cache import Store
from ..core.paths import DATA
from ..model.tokens import encode
from ..model.weights import model_key

FACTS = Store("facts", version=1)


@lru_cache(maxsize=1)
def known_facts() -> tuple[dict, ...]:
    return tuple(json.loads((DATA / "known_1000.json").read_text(encoding="utf-8")))


@torch.no_grad()
def predicted_facts(lm, n: int | None = None, batch_size: int = 32, progress=None) -> list[dict]:
    """Known facts whose greedy next token is the first token of " " + attribute, cached per model.

    Each returned fact gains `answer` (the predicted token string) and `answer_id`. `progress(fraction, message)`
    follows the first computation.
    """
    kept = FACTS.get_or_build(FACTS.path(model_key(lm)), lambda: _predicted(lm, batch_size, progress))
    return kept[:n] if n else kept


def _predicted(lm, batch_size, progress) -> list[dict]:
    facts = known_facts()
    kept = []
    for start in range(0, len(facts), batch_size):
        batch = facts[start:start + batch_size]
        enc = encode(lm, [f["prompt"] for f in batch])
        last = enc["attention_mask"].sum(1) - 1
        h = lm.runner.hidden(**enc)
        top = lm.runner.logits(h[torch.arange(len(batch)), last], norm=False).argmax(-1).tolist()
        for fact, token_id in zip(batch, top):
            target = lm.tok(" " + fact["attribute"].strip(), add_special_tokens=False)["input_ids"]
            if target and target[0] == token_id:
                kept.append({**fact, "answer": lm.tok.decode([token_id]), "answer_id": token_id})
        done = min(start + batch_size, len(facts))
        if progress:
            progress(done / len(facts), f"known facts: {done}/{len(facts)} predicted")
    return kept
