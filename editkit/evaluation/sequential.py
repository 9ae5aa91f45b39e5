"""Sequential editing stress: edits applied one after another, each computed at the weights the previous ones left.

After edit k: efficacy, generalization and specificity over edits 1..k (do the earlier edits survive?), the total
||Delta W|| / ||W|| per edited matrix, and perplexity on held-out WikiText-2 test text. The model is said to
collapse when perplexity exceeds `collapse_factor` times the base perplexity or the efficacy over the edits so far
falls below 0.5 (the failure mode of many sequential ROME edits, Gupta et al. 2024). The base weights are restored
bitwise at the end.
"""
from __future__ import annotations

import math

import torch

from .. import isolation
from ..corpus import token_chunks
from ..editing.api import run_edit
from ..editing.weights import EditHistory, combined
from .datasets import EvalRecord
from .metrics import compare


@torch.no_grad()
def perplexity(lm, n_tokens: int = 512, seq_len: int = 256) -> float:
    """exp(mean NLL) of the next token over the first n_tokens of WikiText-2's test split."""
    body = lm.model
    nll, count = 0.0, 0
    for chunk in token_chunks(lm.tok, n_tokens, seq_len, split="test"):
        ids = torch.tensor([chunk], device=lm.device)
        logits = body(input_ids=ids).logits[0, :-1].float()
        nll += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
        count += ids.shape[1] - 1
    return math.exp(nll / max(count, 1))


def _rates(lm, records: list[EvalRecord]) -> dict:
    from ..scoring import score_targets
    out = {}
    for key, group, new_wins in (("efficacy", "rewrite", True), ("generalization", "paraphrase", True),
                                 ("specificity", "neighborhood", False)):
        wins = []
        for rec in records:
            r = rec.request
            prompts = [r.rewrite] if group == "rewrite" else getattr(r, f"{group}_prompts")
            if not prompts or not r.target_true:
                continue
            new = score_targets(lm, prompts, [r.target_new] * len(prompts))
            true = score_targets(lm, prompts, [r.target_true] * len(prompts))
            ok, _ = compare([s.mean_nll for s in new], [s.mean_nll for s in true], new_wins)
            wins.append(ok)
        out[key] = sum(wins) / len(wins) if wins else math.nan
    return out


def sequential(lm, method: str, records: list[EvalRecord], hparams: dict | None = None,
               collapse_factor: float = 2.0, ppl_tokens: int = 512, progress=None) -> dict:
    """Apply the records' edits one by one; returns the base perplexity and one row per edit."""
    rows = []
    with isolation.session(lm):
        base_ppl = perplexity(lm, ppl_tokens)
        history = EditHistory(lm.model)
        try:
            for k, rec in enumerate(records, 1):
                if progress:
                    progress((k - 1) / len(records), f"{method}: edit {k}/{len(records)}")
                result = run_edit(lm, method, [rec.request], hparams)
                history.push(result.delta, {"case_id": rec.request.case_id})
                total = combined([r.delta for r in history.records])
                params = dict(lm.model.named_parameters())
                rel = {n: float(d.norm() / (params[n].detach() - d).norm()) for n, d in total.items()}
                rates = _rates(lm, records[:k])
                ppl = perplexity(lm, ppl_tokens)
                reasons = []
                if ppl > collapse_factor * base_ppl:
                    reasons.append(f"perplexity {ppl:.1f} > {collapse_factor} x base {base_ppl:.1f}")
                if rates["efficacy"] < 0.5:
                    reasons.append(f"efficacy over the edits so far fell to {rates['efficacy']:.2f}")
                rows.append({"edit": k, "case_id": rec.request.case_id, "seconds": result.seconds, **rates,
                             "relative_norm": rel, "max_relative_norm": max(rel.values()), "perplexity": ppl,
                             "collapsed": bool(reasons), "reason": "; ".join(reasons)})
        finally:
            history.reset()  # bitwise back to the base weights
    if progress:
        progress(1.0, "sequential editing done")
    return {"model": lm.name, "method": method, "base_perplexity": base_ppl, "collapse_factor": collapse_factor,
            "rows": rows}
