"""Geva et al. (2021)'s layer-level analyses on the shipped WikiText-2 validation text.

- Fig. 5, values agree with their keys' patterns: for memory i of layer l, p_i = softmax(E v_i) (value -> output
  embedding -> softmax); w_i = the corpus token that follows the top-1 trigger example of key k_i. Per layer: the
  agreement rate P[argmax p_i = w_i] and the rank of w_i in p_i (1 = top), over a sample of memories.
- Fig. 8, compositionality: at a sample of corpus positions, the FFN output o = sum_i m_i v_i + b (the
  down-projection output) has a top token argmax E o; the output is compositional when that token differs from the
  top token of every one of the `top_memories` memories with the largest coefficients m_i. Per layer: the share.
- Fig. 9, when the prediction is fixed: at the same positions, the residual after layer l (block output) read through
  the final norm and unembedding gives a top token; the prediction is fixed at layer l when that token equals the
  final top token at l and at every later layer. Per layer: the share of positions fixed exactly at l and by l.

Projecting a vector to the vocabulary is `runner.logits(v, norm=norm)` (norm=False: E v as in the paper); for
Gemma the values are scaled by the post-MLP norm's 1 + w first (`inspect.value_vectors`), and the FFN output o is
projected as it enters the residual, post_mlp_norm(o).
Gemma's vocabulary has 262k tokens, so each projected value costs ~0.3 GFLOP: samples are modest by default and
the result is cached as JSON (temporary file + rename; a corrupt file is recomputed).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from ..core.cache import Store, read_json
from ..core.results import JsonObject, Result, frame
from ..data import corpus
from ..figures.memories import agreement_figure, composition_figure, fixed_figure
from ..model.sites import layers
from ..model.weights import model_key
from . import triggers
from .inspect import value_vectors

FORMAT = 2


def defaults(lm) -> dict:
    big = lm.adapter.vocab_size * lm.adapter.d_ff > 50_000_000
    return {"n_positions": 24 if big else 200, "memories_per_layer": 64 if big else 256, "top_memories": 10}


@dataclass
class GevaResult(Result):
    """Geva et al.'s layer-level analyses (module docstring), per layer: how often a value's top token is its
    key's top trigger's next token (Fig. 5), how often the FFN output composes its memories (Fig. 8), where the
    prediction is fixed (Fig. 9)."""

    model: str
    norm: bool
    n_positions: int
    memories_per_layer: int
    top_memories: int
    index: dict  # provenance of the trigger index used for Fig. 5
    agreement: list[float]  # per layer (Fig. 5)
    mean_rank: list[float]
    median_rank: list[float]
    n_memories: list[int]
    compositional: list[float]  # per layer (Fig. 8)
    fixed_at: list[float]  # per layer: share of positions whose prediction is fixed exactly at l (Fig. 9)
    fixed_by: list[float]  # cumulative: share fixed at or before l
    corpus: str = corpus.NOTICE

    def headline(self) -> str:
        return f"{self.model}: {self.n_positions} positions, {self.memories_per_layer} memories per layer"

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def _from_json(cls, d: dict) -> "GevaResult":
        return cls(**d)

    def to_frame(self):
        """One row per layer: agreement, mean and median rank, compositional share, fixed at / by."""
        return frame([{"layer": l, "agreement": a, "mean_rank": mr, "median_rank": md, "compositional": c,
                       "fixed_at": fa, "fixed_by": fb}
                      for l, (a, mr, md, c, fa, fb) in enumerate(zip(self.agreement, self.mean_rank,
                                                                      self.median_rank, self.compositional,
                                                                      self.fixed_at, self.fixed_by))])

    def figure(self, which: str = "agreement"):
        """Fig. 5 ("agreement"), Fig. 8 ("composition") or Fig. 9 ("fixed")."""
        draw = {"agreement": agreement_figure, "composition": composition_figure, "fixed": fixed_figure}[which]
        return draw(self.to_json())


class _ValueTops:
    """argmax_x (W_U v_i)[x] per (layer, memory), computed in batches and remembered."""

    def __init__(self, lm, norm: bool):
        self.lm, self.norm, self.top = lm, norm, {}

    @torch.no_grad()
    def logits(self, layer: int, indices: list[int]) -> torch.Tensor:
        return self.lm.runner.logits(value_vectors(self.lm, layer, indices), norm=self.norm)

    def ensure(self, layer: int, indices, batch: int = 128) -> None:
        need = sorted({int(i) for i in indices} - {i for (l, i) in self.top if l == layer})
        for b in range(0, len(need), batch):
            chunk = need[b:b + batch]
            for i, t in zip(chunk, self.logits(layer, chunk).argmax(-1).tolist()):
                self.top[(layer, i)] = t


def trigger_next_tokens(index, layer: int, memories) -> list[tuple[int, int]]:
    """(i, w_i) for each memory i whose key has a top-1 trigger example followed by a token in its chunk:
    w_i is that next token (Fig. 5's "the token that follows the key's top trigger example")."""
    pairs = []
    for i in memories:
        if np.isfinite(index.values[layer, 0, i]):
            w = index.next_id(int(index.where[layer, 0, i]))
            if w is not None:
                pairs.append((int(i), w))
    return pairs


@torch.no_grad()
def value_agreement(lm, index, layer: int, memories, norm: bool = False, batch: int = 128) -> list[dict]:
    """Fig. 5 memory by memory: for each memory i with a trigger example (trigger_next_tokens), w_i, the value's
    top token argmax softmax(E v_i), the rank of w_i in it (1 = top) and whether they agree."""
    pairs = trigger_next_tokens(index, layer, memories)
    rows = []
    for b in range(0, len(pairs), batch):
        part = pairs[b:b + batch]
        logits = lm.runner.logits(value_vectors(lm, layer, [i for i, _ in part]), norm=norm)
        w = torch.tensor([w for _, w in part], device=logits.device)
        lw = logits.gather(1, w.view(-1, 1))
        ranks = ((logits > lw).sum(-1) + 1).tolist()
        tops = logits.argmax(-1).tolist()
        rows += [{"memory": i, "next_token": wi, "top_token": t, "rank": r, "agree": t == wi}
                 for (i, wi), t, r in zip(part, tops, ranks)]
    return rows


def _sample_positions(lm, n_positions: int, seed: int, seq_len: int = 128):
    """Chunks of the validation text and, per chunk, up to 8 random non-BOS positions, until n_positions."""
    rng = np.random.default_rng(seed)
    bos = lm.tok.bos_token_id
    out, total = [], 0
    for chunk in corpus.token_chunks(lm.tok, 50 * n_positions + 1000, seq_len):
        ok = [j for j, t in enumerate(chunk) if t != bos]
        take = sorted(rng.choice(ok, size=min(8, len(ok), n_positions - total), replace=False).tolist())
        out.append((chunk, take))
        total += len(take)
        if total >= n_positions:
            break
    return out


def _fixed_layers(lens_top: torch.Tensor) -> list[int]:
    """Per position (columns of the (L, n) logit-lens top tokens): the smallest l whose top token is the final
    one at every layer from l on (Geva et al. 2022, Fig. 9)."""
    L = lens_top.shape[0]
    out = []
    for j in range(lens_top.shape[1]):
        same = (lens_top[:, j] == lens_top[-1, j]).tolist()
        l = L
        while l > 0 and same[l - 1]:
            l -= 1
        out.append(l)
    return out


@torch.no_grad()
def _position_pass(lm, n_positions: int, top_memories: int, norm: bool, seed: int,
                   say) -> tuple[int, list[int], list[list[list[int]]], list[list[int]]]:
    """Fig. 8 and 9: forward passes over sampled positions. Returns the positions read, each position's layer
    from which the logit lens's top token is the final one, and per layer each position's top memories and the
    top token of the FFN's output."""
    L, d_ff = lm.adapter.n_layers, lm.adapter.d_ff
    samples = _sample_positions(lm, n_positions, seed)
    n_pos = 0
    fixed_layer = []
    per_layer_mem: list[list[list[int]]] = [[] for _ in range(L)]  # top memories per position
    ffn_top: list[list[int]] = [[] for _ in range(L)]
    for s, (chunk, take) in enumerate(samples):
        got = lm.runner.read(layers("mlp_key", L) + layers("mlp_write", L) + layers("resid_post", L),
                             input_ids=torch.tensor([chunk], device=lm.device))
        res = torch.stack([got[f"resid_post.{l}"][0, take] for l in range(L)])  # (L, n, d)
        lens_top = lm.runner.logits(res, norm=True).argmax(-1).cpu()  # (L, n)
        fixed_layer += _fixed_layers(lens_top)
        for l in range(L):
            m = got[f"mlp_key.{l}"][0, take].float()  # (n, d_ff)
            per_layer_mem[l] += m.topk(min(top_memories, d_ff), -1).indices.tolist()
            o = got[f"mlp_write.{l}"][0, take]  # the FFN output as it enters the residual (Gemma: post-normed)
            ffn_top[l] += lm.runner.logits(o, norm=norm).argmax(-1).tolist()
        n_pos += len(take)
        say(0.4 + 0.2 * (s + 1) / len(samples), f"{n_pos}/{n_positions} positions")
    return n_pos, fixed_layer, per_layer_mem, ffn_top


@torch.no_grad()
def compute(lm, n_positions: int | None = None, memories_per_layer: int | None = None, top_memories: int = 10,
            norm: bool = False, index_tokens: int | None = None, seed: int = 0, progress=None) -> GevaResult:
    d = defaults(lm)
    n_positions = int(n_positions or d["n_positions"])
    memories_per_layer = int(memories_per_layer or d["memories_per_layer"])
    a = lm.adapter
    L, d_ff = a.n_layers, a.d_ff
    say = progress or (lambda f, msg: None)
    index = triggers.get_index(lm, index_tokens, progress=lambda f, msg: say(0.4 * f, "trigger index: " + msg))
    tops = _ValueTops(lm, norm)

    n_pos, fixed_layer, per_layer_mem, ffn_top = _position_pass(lm, n_positions, top_memories, norm, seed, say)

    # Fig. 5: a sample of memories per layer, next token of each key's top-1 trigger example
    rng = np.random.default_rng(seed)
    agreement, mean_rank, median_rank, n_mem, compositional = [], [], [], [], []
    for l in range(L):
        sample = (np.arange(d_ff) if memories_per_layer >= d_ff
                  else np.sort(rng.choice(d_ff, memories_per_layer, replace=False)))
        rows = value_agreement(lm, index, l, sample.tolist(), norm)
        for r in rows:
            tops.top[(l, r["memory"])] = r["top_token"]
        ranks = [r["rank"] for r in rows]
        agreement.append(sum(r["agree"] for r in rows) / len(rows) if rows else float("nan"))
        mean_rank.append(float(np.mean(ranks)) if ranks else float("nan"))
        median_rank.append(float(np.median(ranks)) if ranks else float("nan"))
        n_mem.append(len(rows))
        # Fig. 8 for this layer
        tops.ensure(l, [i for row in per_layer_mem[l] for i in row])
        diff = [all(tops.top[(l, i)] != t for i in row) for row, t in zip(per_layer_mem[l], ffn_top[l])]
        compositional.append(float(np.mean(diff)) if diff else float("nan"))
        say(0.6 + 0.4 * (l + 1) / L, f"layer {l + 1}/{L}: value projections")
    fixed = np.asarray(fixed_layer)
    fixed_at = [float((fixed == l).mean()) for l in range(L)]
    fixed_by = [float((fixed <= l).mean()) for l in range(L)]
    return GevaResult(lm.name, norm, n_pos, memories_per_layer, top_memories,
                      {k: index.meta[k] for k in ("n_tokens", "seq_len", "top", "corpus")},
                      agreement, mean_rank, median_rank, n_mem, compositional, fixed_at, fixed_by)


STORE = Store("geva", version=FORMAT)


def cache_path(lm, n_positions, memories_per_layer, top_memories, norm, index_tokens, seed):
    n_tokens = int(index_tokens or triggers.default_n_tokens(lm))
    return STORE.path(model_key(lm), positions=n_positions, memories=memories_per_layer, top=top_memories,
                      index_tokens=n_tokens, norm=bool(norm), seed=seed)


def analyses(lm, n_positions: int | None = None, memories_per_layer: int | None = None, top_memories: int = 10,
             norm: bool = False, index_tokens: int | None = None, seed: int = 0, progress=None,
             cache: bool = True) -> GevaResult:
    """The cached analyses (computed on first use; see module docstring). cache=False computes them afresh (and
    stores the fresh result); `progress(fraction, message)` follows the computation."""
    d = defaults(lm)
    n_positions = int(n_positions or d["n_positions"])
    memories_per_layer = int(memories_per_layer or d["memories_per_layer"])
    path = cache_path(lm, n_positions, memories_per_layer, top_memories, norm, index_tokens, seed)
    cached = STORE.get(path, lambda p: GevaResult.from_json(read_json(p))) if cache else None
    if cached is not None:
        return cached
    result = compute(lm, n_positions, memories_per_layer, top_memories, norm, index_tokens, seed, progress)
    STORE.put(path, result.to_json())
    return result
