"""How Runner.complete continues prompts (runner.py): greedy or seeded top-k (`Decoding`), and the top-k
sampler that draws from its own random stream (`SeededTopK`)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.errors import EditkitError


@dataclass(frozen=True)
class Decoding:
    """How `Runner.complete` continues prompts: greedy (top_k None), or top-k sampling from a private random stream
    seeded with `seed` (SeededTopK); at most `new_tokens` new tokens, and no end-of-text before `min_new_tokens`."""

    new_tokens: int
    top_k: int | None = None
    seed: int = 0
    min_new_tokens: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.new_tokens, int) or self.new_tokens < 0:
            raise EditkitError("the number of new tokens must be a non-negative integer")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise EditkitError("top-k sampling needs k >= 1")

    @classmethod
    def greedy(cls, new_tokens: int) -> Decoding:
        return cls(new_tokens)

    @classmethod
    def sampled(cls, new_tokens: int, seed: int = 0, top_k: int = 5, min_new_tokens: int = 0) -> Decoding:
        return cls(new_tokens, top_k, seed, min_new_tokens)


class SeededTopK:
    """Top-k sampling as a greedy step, with a private random stream: argmax_x (log p_k(x) + g_x), g_x ~ Gumbel(0, 1),
    is a sample from p_k, the softmax restricted to the k most likely tokens (the Gumbel-max trick). The noise comes
    from this call's own torch.Generator, never from torch's global generator, which every thread of a served app
    shares: two sessions sampling at once with the same seed each get exactly their single-threaded text."""

    def __init__(self, k: int, seed: int):
        self.k = k
        self.gen = torch.Generator(device="cpu").manual_seed(int(seed))

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float()
        kth = scores.topk(min(self.k, scores.shape[-1]), dim=-1).values[..., -1:]
        logp = scores.masked_fill(scores < kth, float("-inf")).log_softmax(-1)
        u = torch.rand(scores.shape, generator=self.gen).clamp_(min=1e-20, max=1 - 1e-7).to(scores.device)
        return logp - torch.log(-torch.log(u))
