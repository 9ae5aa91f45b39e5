"""CounterFact's comparisons at scale: the mean per-token NLL of target_new and of target_true after many prompts.

scoring.score_targets scores one (prompt, target) row at a time and projects each row separately. A lifelong run
measures thousands of prompts after every batch, so this module does the same arithmetic with less work, and gives
the same numbers up to rounding (tests/test_sequential.py):
- one row per prompt where it suffices: the first target token is predicted at the prompt's last position, which
  both targets share (causal attention), so when either target is a single token the row of the other serves both;
  only when both have several tokens are two rows run;
- rows sorted by length and batched (little padding), the final states of all scored positions gathered and their
  log-probabilities taken in one pass over the vocabulary (runner.answer_logprob: no (N, V) logits).
"""
from __future__ import annotations

import torch

from ..model.scoring import target_ids
from ..model.tokens import pad_right


def _rows(tok, prompts, news, trues):
    """Rows to run and, per prompt, where each target token is scored: (row, position, token) triples."""
    rows, plans = [], []
    for prompt, new, true in zip(prompts, news, trues):
        p = tok(prompt, add_special_tokens=True)["input_ids"]
        targets = [target_ids(tok, new), target_ids(tok, true)]
        longer = 0 if len(targets[0]) >= len(targets[1]) else 1
        plan = []
        if min(len(t) for t in targets) == 1:  # one row: the longer target, the single token read at the prompt end
            r = len(rows)
            rows.append(p + targets[longer][:-1])
            for t in targets:
                plan.append([(r, len(p) - 1 + m, tid) for m, tid in enumerate(t)])
        else:
            for t in targets:
                r = len(rows)
                rows.append(p + t[:-1])
                plan.append([(r, len(p) - 1 + m, tid) for m, tid in enumerate(t)])
        plans.append(plan)
    return rows, plans


@torch.no_grad()
def pair_nlls(lm, prompts: list[str], news: list[str], trues: list[str], batch_tokens: int = 2048,
              tops: bool = False) -> list[tuple]:
    """(mean NLL of new, mean NLL of true) after each prompt, as score_targets' `mean_nll` (targets with their
    leading space). With `tops`, a third item: the argmax token at each of target_true's positions, teacher-forced
    (score_targets' `token_argmax` of the true target: what EasyEdit's locality compares)."""
    if not prompts:
        return []
    rows, plans = _rows(lm.tok, prompts, news, trues)
    scored = {}  # (row, position, token) -> log p of that token there
    wanted: dict[int, list[tuple[int, int]]] = {}
    for plan in plans:
        for target in plan:
            for r, pos, tid in target:
                wanted.setdefault(r, []).append((pos, tid))
    order = sorted(range(len(rows)), key=lambda r: len(rows[r]))
    start = 0
    while start < len(order):
        width, end = len(rows[order[start]]), start
        while end < len(order) and (end - start + 1) * max(width, len(rows[order[end]])) <= batch_tokens:
            width = max(width, len(rows[order[end]]))
            end += 1
        end = max(end, start + 1)
        chunk = order[start:end]
        ids, mask = pad_right([rows[r] for r in chunk], lm.tok.pad_token_id, lm.device)
        h = lm.runner.hidden(input_ids=ids, attention_mask=mask)
        sel = [(i, pos, tid, r) for i, r in enumerate(chunk) for pos, tid in wanted[r]]
        x = h[torch.tensor([s[0] for s in sel]), torch.tensor([s[1] for s in sel])]
        logp, best = lm.runner.answer_logprob(x, torch.tensor([s[2] for s in sel], device=x.device), norm=False,
                                              top=True)
        for (_, pos, tid, r), lp, b in zip(sel, logp.tolist(), best.tolist()):
            scored[(r, pos, tid)] = (lp, b)
        start = end
    out = []
    for plan in plans:
        nlls = [-sum(scored[(r, pos, tid)][0] for r, pos, tid in t) / len(t) for t in plan]
        argmax_true = [scored[(r, pos, tid)][1] for r, pos, tid in plan[1]]
        out.append((nlls[0], nlls[1], argmax_true) if tops else (nlls[0], nlls[1]))
    return out

