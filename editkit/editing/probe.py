"""P(target_new) and P(target_true) on a request's rewrite, paraphrase and neighborhood prompts, at the current
weights: the numbers behind "did the edit take, did it generalize, what else moved"."""
from __future__ import annotations

from ..scoring import score_targets
from .requests import EditRequest


def edit_probabilities(lm, request: EditRequest) -> dict:
    groups = {"rewrite": [request.rewrite], "paraphrase": request.paraphrase_prompts,
              "neighborhood": request.neighborhood_prompts}
    out = {}
    for group, prompts in groups.items():
        rows = []
        if prompts:
            targets = [request.target_new] + ([request.target_true] if request.target_true else [])
            scores = score_targets(lm, [p for p in prompts for _ in targets], [t for _ in prompts for t in targets])
            for i, p in enumerate(prompts):
                row = {"prompt": p, "p_new": scores[i * len(targets)].prob}
                if request.target_true:
                    row["p_true"] = scores[i * len(targets) + 1].prob
                rows.append(row)
        out[group] = rows
    return out
