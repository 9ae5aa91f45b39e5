"""What a lifelong run (sequential.py) measures at each checkpoint: the CounterFact rates per record and
their drift against the original model (`rates`), perplexity on WikiText-2, ROME's fluency, and the
accumulated update's norms and condition numbers (`update_norms`). Also read by the benchmarks that compare
with a run."""
from __future__ import annotations

import math

import torch

from ..data.corpus import token_chunks
from ..editing.result import condition_number
from .metrics import compare, n_gram_entropy, token_agreement
from .pairs import pair_nlls

PPL_TOKENS = 2048
FLUENCY_PROMPTS = ("The history of the city began", "In the morning, the children", "Scientists have found that",
                   "The company announced on Monday", "My favourite book is about")
FLUENCY_TOKENS = 40
GROUPS = ("rewrite", "paraphrase", "neighborhood")


@torch.no_grad()
def perplexity(lm, n_tokens: int = PPL_TOKENS, seq_len: int = 512) -> float:
    """exp(mean NLL) of the next token over the first n_tokens of WikiText-2's test split (log-probabilities from
    one pass over the vocabulary per chunk: runner.answer_logprob)."""
    nll, count = 0.0, 0
    seq_len = min(seq_len, lm.adapter.max_length)  # tiny test models have 256 positions
    for chunk in token_chunks(lm.tok, n_tokens, seq_len, split="test"):
        ids = torch.tensor([chunk], device=lm.device)
        h = lm.runner.hidden(input_ids=ids)[0, :-1]
        nll -= float(lm.runner.answer_logprob(h, ids[0, 1:], norm=False).double().sum())
        count += ids.shape[1] - 1
    return math.exp(nll / max(count, 1))


@torch.no_grad()
def fluency(lm, prompts=FLUENCY_PROMPTS, new_tokens: int = FLUENCY_TOKENS, seed: int = 0) -> float:
    """Mean weighted n-gram entropy (bits) of sampled continuations of `prompts` (ROME's fluency, x100 in tables)."""
    from .measure import sample

    if not prompts or new_tokens < 1:
        return math.nan
    return n_gram_entropy([p + sample(lm, p, new_tokens, seed) for p in prompts])


def rates(lm, records, groups=GROUPS, original: list | None = None) -> list[dict]:
    """Per record: the CounterFact rates of its rewrite, paraphrase and neighborhood prompts (nan without data),
    and `answers`: the model's own answers on its neighborhood prompts (whether P(true) > P(new), and the argmax
    token at each of target_true's teacher-forced positions). With `original` (those answers of the unedited model,
    one per record), the two drifts against the original model (EasyEdit issue #643: locality in a sequential run
    compares with the model before the first edit, not with the edited one): `kept` = share of neighborhood prompts
    whose comparison P(true) > P(new) came out as the original's (probability comparison), `locality` = share of
    target_true's positions whose argmax token is the original's (token accuracy, EasyEdit)."""
    prompts, news, trues, owner = [], [], [], []
    for i, rec in enumerate(records):
        r = rec.request
        if not r.target_true:
            continue
        for g, ps in zip(GROUPS, ([r.rewrite], r.paraphrase_prompts, r.neighborhood_prompts)):
            if g not in groups:
                continue
            for p in ps:
                prompts.append(p)
                news.append(r.target_new)
                trues.append(r.target_true)
                owner.append((i, g))
    nlls = pair_nlls(lm, prompts, news, trues, tops=True)
    got: dict = {}
    for (i, g), (new, true, top) in zip(owner, nlls):
        got.setdefault((i, g), ([], [], []))
        for column, value in zip(got[(i, g)], (new, true, top)):
            column.append(value)
    out = []
    for i in range(len(records)):
        row = {}
        for g in groups:
            new, true, _ = got.get((i, g), ([], [], []))
            row[g] = compare(new, true, g != "neighborhood")[0] if new else math.nan
        if "neighborhood" in groups:
            new, true, top = got.get((i, "neighborhood"), ([], [], []))
            row["answers"] = {"true_wins": [t < n for n, t in zip(new, true)], "argmax": top}
            if original is not None:
                row.update(_drift(original[i], row["answers"]))
        out.append(row)
    return out


def _drift(before: dict | None, now: dict) -> dict:
    """`kept` and `locality` of one record's neighborhood answers against the original model's (rates)."""
    if not before or not before["true_wins"]:
        return {"kept": math.nan, "locality": math.nan}
    same = [a == b for a, b in zip(before["true_wins"], now["true_wins"])]
    return {"kept": sum(same) / len(same), "locality": token_agreement(before["argmax"], now["argmax"])}


def update_norms(lm, total: dict) -> dict:
    """Per edited matrix ||dW|| / ||W|| and cond(W + dW) (PRUNE's quantity, one SVD each per checkpoint), and the
    totals over all edited matrices."""
    params = dict(lm.model.named_parameters())
    rel = {n: float(d.norm() / params[n].detach().norm()) for n, d in total.items()}
    cond = {n: condition_number(params[n].detach() + d.to(params[n].dtype)) for n, d in total.items()}
    dsq = sum(float(d.norm()) ** 2 for d in total.values())
    wsq = sum(float(params[n].detach().norm()) ** 2 for n in total)
    return {"relative_norm": rel, "condition": cond, "max_relative_norm": max(rel.values()) if rel else 0.0,
            "total_relative_norm": math.sqrt(dsq / wsq) if wsq else 0.0, "total_delta_norm": math.sqrt(dsq)}
