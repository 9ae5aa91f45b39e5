"""Text the model produces: next-token predictions, continuations of one prompt (greedy or sampled, through
runner.complete), and every block's output (the logit lens reads them: editkit/lens.py). Tokenizing is
tokens.py."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..core.errors import EditkitError
from .decoding import Decoding
from .prediction import Prediction
from .sites import layers
from .tokens import check_prompt, encode

if TYPE_CHECKING:
    from .lm import LM


@torch.no_grad()
def last_logits(lm: LM, prompts: list[str] | str) -> torch.Tensor:
    """Logits at each prompt's last real token, (batch, vocab), projecting only there."""
    batch = encode(lm, prompts)
    last = batch["attention_mask"].sum(1) - 1
    h = lm.runner.hidden(**batch)  # already through the final norm
    return lm.runner.logits(h[torch.arange(h.shape[0], device=h.device), last], norm=False)


def top_k(lm: LM, prompt: str, k: int = 5) -> list[Prediction]:
    check_prompt(lm, prompt)
    if k < 1:
        raise EditkitError("top-k needs k >= 1")
    logits = last_logits(lm, prompt)[0]
    probs = torch.softmax(logits, -1)
    p, i = probs.topk(min(k, probs.numel()))
    return [Prediction(lm.tok.decode([t]), int(t), float(q), float(logits[t])) for q, t in zip(p, i)]


def greedy(lm: LM, prompt: str, max_new_tokens: int = 20) -> str:
    """Greedy continuation of `prompt` (the new text only)."""
    check_prompt(lm, prompt)
    return lm.runner.complete(prompt, Decoding.greedy(max_new_tokens))[0]


def sample(lm: LM, prompt: str, max_new_tokens: int, seed: int = 0, top_k: int = 5,
           min_new_tokens: int = 0) -> str:
    """A top-k sampled continuation of `prompt` (the new text only), reproducible for a given seed also while other
    threads sample (decoding.SeededTopK)."""
    return lm.runner.complete(prompt, Decoding.sampled(max_new_tokens, seed, top_k, min_new_tokens))[0]


@torch.no_grad()
def block_outputs(lm: LM, prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Every block's output (layers, tokens, d_model) and the model's logits (tokens, vocab) for one prompt."""
    L = lm.adapter.n_layers
    got = lm.runner.read(layers("resid_post", L), full=True, **encode(lm, prompt))
    assert got.hidden is not None, "a full read keeps the final state"
    return torch.stack([got[f"resid_post.{l}"][0] for l in range(L)]), lm.runner.logits(got.hidden, norm=False)[0]


@torch.no_grad()
def block_states(lm: LM, prompt: str) -> torch.Tensor:
    """Every block's output (layers, tokens, d_model) for one prompt, without projecting any of them to the
    vocabulary (the run stops after the last block: cheaper than block_outputs when the logits are not needed)."""
    L = lm.adapter.n_layers
    got = lm.runner.read(layers("resid_post", L), **encode(lm, prompt))
    return torch.stack([got[f"resid_post.{l}"][0] for l in range(L)])
