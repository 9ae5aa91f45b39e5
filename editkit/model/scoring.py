"""Teacher-forced scoring of target strings after prompts: the building block of every edit metric.

For a prompt p and a target t = (t_1..t_m) (tokenized after the prompt, with its leading space),
log P(t | p) = sum_j log P(t_j | p, t_<j). CounterFact compares these (ROME's `test_batch_prediction`),
EasyEdit takes the argmax token accuracy (`test_prediction_acc`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..core.errors import EditkitError
from ..core.settings import limits
from .tokens import pad_right

if TYPE_CHECKING:
    from .lm import LM


@dataclass
class TargetScore:
    logprob: float  # log P(t | p), summed over the target's tokens
    n_tokens: int
    token_logprobs: list[float]
    token_hits: list[bool]  # argmax at each target position equals the target token (teacher forcing)
    token_argmax: list[int] = field(default_factory=list)  # the model's argmax at each target position

    @property
    def prob(self) -> float:
        """P(t | p) as a product of token probabilities."""
        return float(torch.tensor(self.logprob).exp())

    @property
    def mean_nll(self) -> float:
        return -self.logprob / max(self.n_tokens, 1)

    @property
    def accuracy(self) -> float:
        return sum(self.token_hits) / max(len(self.token_hits), 1)


def target_ids(tok: Any, target: str) -> list[int]:
    """Token ids of a target as it continues a prompt (no special tokens)."""
    if not target or not target.strip():
        raise EditkitError("the target is empty")
    ids = tok(target, add_special_tokens=False)["input_ids"]
    if not ids:
        raise EditkitError(f"target {target!r} has no tokens")
    return list(ids)


@torch.no_grad()
def score_targets(lm: LM, prompts: list[str], targets: list[str], batch_size: int = 16) -> list[TargetScore]:
    """Score each (prompt, target) pair; targets are given with their leading space (" Paris")."""
    if len(prompts) != len(targets):
        raise EditkitError("score_targets needs one target per prompt")
    out: list[TargetScore] = []
    for start in range(0, len(prompts), batch_size):
        out += _score_batch(lm, prompts[start:start + batch_size], targets[start:start + batch_size])
    return out


def _score_batch(lm: LM, prompts: list[str], targets: list[str]) -> list[TargetScore]:
    tok = lm.tok
    rows, spans = [], []
    limit = min(lm.adapter.max_length, limits().prompt_tokens)
    for prompt, target in zip(prompts, targets):
        p_ids = tok(prompt, add_special_tokens=True)["input_ids"]
        t_ids = target_ids(tok, target)
        if len(p_ids) + len(t_ids) > limit:
            raise EditkitError(f"the prompt {prompt[:40]!r}... with its target has {len(p_ids) + len(t_ids)} "
                               f"tokens; the limit is {limit}")
        rows.append(p_ids + t_ids)
        spans.append((len(p_ids), len(t_ids)))
    ids, mask = pad_right(rows, tok.pad_token_id, lm.device)
    h = lm.runner.hidden(input_ids=ids, attention_mask=mask)  # final norm applied
    # every row's target positions projected to the vocabulary together: one read of the unembedding matrix
    # (Gemma's is 671 MB) for the batch instead of one per row
    at = [(i, n_p - 1 + j) for i, (n_p, n_t) in enumerate(spans) for j in range(n_t)]
    logits = lm.runner.logits(h[[i for i, _ in at], [p for _, p in at]], norm=False)
    logp = torch.log_softmax(logits, -1)
    tgt = torch.cat([ids[i, n_p: n_p + n_t] for i, (n_p, n_t) in enumerate(spans)])
    tok_lp_all = logp.gather(1, tgt[:, None])[:, 0]
    argmax_all = logits.argmax(-1)
    scores, start = [], 0
    for _, n_t in spans:
        tok_lp, argmax, t = tok_lp_all[start:start + n_t], argmax_all[start:start + n_t], tgt[start:start + n_t]
        scores.append(TargetScore(float(tok_lp.sum()), n_t, tok_lp.tolist(), (argmax == t).tolist(),
                                  argmax.tolist()))
        start += n_t
    return scores
