"""Sequential editing stress: edits applied one after another, each computed at the weights the previous ones left.

Edit k is computed by run_edit at the weights with edits 1..k-1 applied, and then applied itself, as nested
`weights.applied` contexts: (W + d_1) + d_2 ..., the arithmetic of in-place edits, but only in this context. The
shared parameters are never written, so other sessions on the same model never see these edits. After edit k: efficacy, generalization and specificity over edits 1..k (CounterFact rates,
metrics.compare), retention = the share of the earlier edits (1..k-1) that succeeded right after they were made
and still succeed, the relative norm ||Delta W||_F / ||W||_F of the accumulated update per edited matrix and over
all of them together, and perplexity on the first `ppl_tokens` tokens of WikiText-2's test split.

`collapsed` is set, with the reason, when perplexity exceeds `collapse_factor` (default 2) times the base
perplexity, or retention falls below `retention_floor` (default 0.5): the two failure modes of many sequential
ROME edits (Gupta et al. 2024; EasyEdit issue #18, "editing capacity is around 100"). Leaving the block (also on
an error) drops every edit.
"""
from __future__ import annotations

import math
from contextlib import ExitStack

import torch

from .. import isolation
from ..corpus import token_chunks
from ..editing.api import run_edit
from ..editing.weights import applied, combined
from ..errors import EditkitError
from ..scoring import score_targets
from .datasets import as_record
from .metrics import compare

PPL_TOKENS = 2048


@torch.no_grad()
def perplexity(lm, n_tokens: int = PPL_TOKENS, seq_len: int = 512) -> float:
    """exp(mean NLL) of the next token over the first n_tokens of WikiText-2's test split."""
    nll, count = 0.0, 0
    seq_len = min(seq_len, lm.adapter.max_length)  # tiny test models have 256 positions
    for chunk in token_chunks(lm.tok, n_tokens, seq_len, split="test"):
        ids = torch.tensor([chunk], device=lm.device)
        logits = lm.model(input_ids=ids).logits[0, :-1].float()
        nll += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
        count += ids.shape[1] - 1
    return math.exp(nll / max(count, 1))


def _wins(lm, record, group: str) -> float:
    """The CounterFact rate of one record on one prompt group at the current weights (nan without data)."""
    r = record.request
    prompts = {"rewrite": [r.rewrite], "paraphrase": r.paraphrase_prompts,
               "neighborhood": r.neighborhood_prompts}[group]
    if not prompts or not r.target_true:
        return math.nan
    new = score_targets(lm, prompts, [r.target_new] * len(prompts))
    true = score_targets(lm, prompts, [r.target_true] * len(prompts))
    return compare([s.mean_nll for s in new], [s.mean_nll for s in true], group != "neighborhood")[0]


def _mean(values):
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else None


def sequential(lm, method: str, requests, hparams: dict | None = None, collapse_factor: float = 2.0,
               retention_floor: float = 0.5, ppl_tokens: int = PPL_TOKENS, progress=None) -> dict:
    """Apply the edits of `requests` (EditRequests, EvalRecords or request dicts) one by one with `method`.
    Returns {"model", "method", "base_perplexity", "collapse_factor", "retention_floor", "ppl_tokens",
    "rows": [one dict per edit], "collapsed_at": first collapsed edit or None}."""
    records = [as_record(r) for r in requests]
    if not records:
        raise EditkitError("no requests to apply")
    if collapse_factor <= 1 or not 0 <= retention_floor <= 1 or ppl_tokens < 2:
        raise EditkitError("collapse_factor must exceed 1, retention_floor lie in [0, 1], ppl_tokens be >= 2")
    rows, took = [], []
    with isolation.session(lm), ExitStack() as stack:
        base_ppl = perplexity(lm, ppl_tokens)
        params = dict(lm.model.named_parameters())
        deltas = []
        for k, rec in enumerate(records, 1):
            if progress:
                progress((k - 1) / len(records), f"{method}: edit {k}/{len(records)}")
            result = run_edit(lm, method, [rec.request], hparams)  # at the weights with edits 1..k-1
            stack.enter_context(applied(lm, result.delta))  # edit k, in this context only
            deltas.append(result.delta)
            total = combined(deltas)
            base = {n: params[n].detach() for n in total}
            rel = {n: float(d.norm() / base[n].norm()) for n, d in total.items()}
            total_rel = math.sqrt(sum(float(d.norm()) ** 2 for d in total.values())) / \
                math.sqrt(sum(float(w.norm()) ** 2 for w in base.values()))
            rates = {g: [_wins(lm, r, g) for r in records[:k]] for g in ("rewrite", "paraphrase", "neighborhood")}
            took.append(rates["rewrite"][-1] == 1.0)
            kept = [w == 1.0 for w, t in zip(rates["rewrite"][:-1], took[:-1]) if t]
            retention = sum(kept) / len(kept) if kept else None
            ppl = perplexity(lm, ppl_tokens)
            reasons = []
            if ppl > collapse_factor * base_ppl:
                reasons.append(f"perplexity {ppl:.1f} > {collapse_factor:g} x base {base_ppl:.1f}")
            if retention is not None and retention < retention_floor:
                reasons.append(f"only {retention:.0%} of the earlier successful edits still hold")
            rows.append({"edit": k, "case_id": rec.request.case_id, "seconds": result.seconds,
                         "efficacy": _mean(rates["rewrite"]), "generalization": _mean(rates["paraphrase"]),
                         "specificity": _mean(rates["neighborhood"]), "took": took[-1],
                         "retention": retention, "relative_norm": rel, "max_relative_norm": max(rel.values()),
                         "total_relative_norm": total_rel, "perplexity": ppl,
                         "perplexity_ratio": ppl / base_ppl, "collapsed": bool(reasons),
                         "reason": "; ".join(reasons)})
    if progress:
        progress(1.0, "sequential editing done")
    first = next((r["edit"] for r in rows if r["collapsed"]), None)
    return {"model": lm.name, "method": method, "base_perplexity": base_ppl, "collapse_factor": collapse_factor,
            "retention_floor": retention_floor, "ppl_tokens": ppl_tokens, "rows": rows, "collapsed_at": first}
