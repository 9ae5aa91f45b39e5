"""A run's keys and values as an immutable snapshot (runner.py: every run that continues from one gets a fresh
HF cache holding a copy, so nothing is ever rewound)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..core.errors import EditkitError


@dataclass(frozen=True)
class KV:
    """Keys and values of positions [0, length) of a run, per layer (rows, kv_heads, length, head_dim)."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[-2]) if self.keys else 0

    @property
    def batch(self) -> int:
        return int(self.keys[0].shape[0]) if self.keys else 0

    def rows(self, index: int | torch.Tensor | list[int]) -> KV:
        """The rows `index` (a tensor/list, repeats allowed) of every layer; an int broadcasts one row (no copy)."""
        if isinstance(index, int):
            if self.batch != 1:
                raise EditkitError("only a one-row KV can be broadcast")
            return KV(tuple(k.expand(index, *k.shape[1:]) for k in self.keys),
                      tuple(v.expand(index, *v.shape[1:]) for v in self.values))
        index = torch.as_tensor(index, device=self.keys[0].device)
        return KV(tuple(k.index_select(0, index) for k in self.keys),
                  tuple(v.index_select(0, index) for v in self.values))

    def prefix(self, length: int) -> KV:
        """The keys and values of positions [0, length) (views, no copy)."""
        return KV(tuple(k[..., :length, :] for k in self.keys), tuple(v[..., :length, :] for v in self.values))

    def cache(self, config: Any) -> Any:
        """A fresh HF cache holding these keys and values (runs append to it; this snapshot never changes)."""
        from transformers import DynamicCache

        cache = DynamicCache(config=config)
        for layer, k, v in zip(cache_layers(cache, len(self.keys)), self.keys, self.values):
            layer.update(k, v)
        return cache

    @classmethod
    def from_cache(cls, cache: Any, n_layers: int) -> KV | None:
        """The snapshot of an HF cache, or None when it does not hold every position of every layer (a sliding
        window that dropped tokens, a cache that does not expose its layers)."""
        layers = cache_layers(cache, n_layers)
        if len(layers) != n_layers or not all(getattr(l, "keys", None) is not None for l in layers):
            return None
        seen = {int(l.keys.shape[-2]) for l in layers}
        total = {int(getattr(l, "cumulative_length", l.keys.shape[-2])) for l in layers}
        if len(seen) != 1 or seen != total:
            return None
        return cls(tuple(l.keys for l in layers), tuple(l.values for l in layers))


def cache_layers(cache: Any, n_layers: int) -> list[Any]:
    """The per-layer entries of an HF cache (of its self-attention part in an encoder-decoder), at most
    n_layers."""
    cache = getattr(cache, "self_attention_cache", cache)  # an encoder-decoder wrapper
    layers = list(getattr(cache, "layers", []))
    return layers[:n_layers]
