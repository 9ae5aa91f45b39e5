"""Key trigger examples (Geva et al. 2021, §3.1): the corpus prefixes x_1..x_j whose layer-l representation gives
memory i its largest coefficient m_i = f(x_j . k_i).

A per-model index over the shipped WikiText-2 validation text is built once in one streaming pass (one forward per
batch of chunks, capturing every layer's down-projection input) and keeps, for every (layer, memory), the running
top-t coefficients and the corpus token where they occurred (a top-k merge per batch, so memory stays
O(layers * t * d_ff) whatever the number of tokens). It is cached as one .npz under
the editkit cache (store "triggers", one folder per model) with provenance, written atomically; a file that fails
to load or disagrees with its provenance is rebuilt. Lookups read the cached arrays (milliseconds).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..core.cache import Store, atomic_write
from ..core.errors import EditkitError
from ..data import corpus
from ..model.sites import Site
from ..model.tokens import pad_right
from ..model.weights import model_key
from .inspect import check_layer, check_memory, label

DEFAULT_TOP = 10
DEFAULT_SEQ_LEN = 128
DEFAULT_BATCH = 8
FORMAT = 1


def default_n_tokens(lm) -> int:
    """20,000 tokens for the embedded-size models; fewer for the tiny test models (4 layers x 256 memories)."""
    return 20_000 if lm.adapter.d_model >= 256 else 4_000


@dataclass
class TriggerExample:
    layer: int
    memory: int
    label: str
    rank: int
    coefficient: float
    prefix: str  # text before the trigger token (within its chunk)
    trigger: str  # the token at which m_i was measured
    next_token: str | None  # the corpus token after the trigger (None at a chunk's end)
    token_index: int  # position in the index's flat token list

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class TriggerIndex:
    """values/where: (layers, t, d_ff) coefficients (descending) and flat token positions; tokens: the corpus ids;
    chunk_start: for each flat position, where its chunk starts (prefixes never cross chunks)."""

    meta: dict
    values: np.ndarray
    where: np.ndarray
    tokens: np.ndarray
    chunk_start: np.ndarray
    path: Path | None = None

    @property
    def top(self) -> int:
        return self.values.shape[1]

    def next_id(self, g: int) -> int | None:
        if g + 1 < len(self.tokens) and self.chunk_start[g + 1] == self.chunk_start[g]:
            return int(self.tokens[g + 1])
        return None


STORE = Store("triggers", version=FORMAT)


def index_path(model: str, n_tokens: int, seq_len: int, top: int) -> Path:
    return STORE.path("index", ".npz", within=model, n_tokens=n_tokens, seq_len=seq_len, top=top)


@torch.no_grad()
def build_index(lm, n_tokens: int, seq_len: int = DEFAULT_SEQ_LEN, top: int = DEFAULT_TOP,
                batch_size: int = DEFAULT_BATCH, progress: Callable[[float, str], None] | None = None
                ) -> TriggerIndex:
    """Stream `n_tokens` corpus tokens through the model, keeping the top-`top` coefficients of every memory."""
    if n_tokens < 2 or seq_len < 2 or top < 1:
        raise EditkitError("the trigger index needs n_tokens >= 2, seq_len >= 2 and top >= 1")
    a = lm.adapter
    L, d_ff = a.n_layers, a.d_ff
    chunks = list(corpus.token_chunks(lm.tok, n_tokens, seq_len))
    bos = lm.tok.bos_token_id
    starts = np.cumsum([0] + [len(c) for c in chunks])
    total = int(starts[-1])
    best_v = torch.full((L, 0, d_ff), float("-inf"))
    best_g = torch.zeros((L, 0, d_ff), dtype=torch.long)
    t0 = time.time()
    for b in range(0, len(chunks), batch_size):
        batch = chunks[b:b + batch_size]
        ids, mask = pad_right(batch, lm.tok.pad_token_id)
        g = torch.full(ids.shape, -1, dtype=torch.long)  # flat corpus position of each cell
        for r, c in enumerate(batch):
            g[r, :len(c)] = torch.arange(starts[b + r], starts[b + r] + len(c))
        valid = mask.bool() & (ids != bos if bos is not None else True)  # BOS is an empty prefix, not a trigger
        keys = lm.runner.read({str(l): Site("mlp_key", l) for l in range(L)}, input_ids=ids.to(lm.device),
                              attention_mask=mask.to(lm.device))
        flat_valid = valid.reshape(-1)
        g_flat = g.reshape(-1)[flat_valid]  # (n,)
        m = torch.stack([keys[str(l)].reshape(-1, d_ff)[flat_valid.to(keys[str(l)].device)].float().cpu()
                         for l in range(L)])  # (L, n, d_ff)
        del keys
        # running top-k merge (Geva §3.1: top-t trigger examples per key): only the values are concatenated;
        # a selected slot < t keeps its old position, a slot >= t comes from this batch
        t_old = best_v.shape[1]
        cand_v = torch.cat([best_v, m], 1)
        k = min(top, cand_v.shape[1])
        best_v, sel = cand_v.topk(k, dim=1)
        g_new = g_flat[(sel - t_old).clamp(min=0)]
        g_old = best_g.gather(1, sel.clamp(max=max(t_old - 1, 0))) if t_old else g_new
        best_g = torch.where(sel >= t_old, g_new, g_old)
        if progress is not None:
            done = int(starts[min(b + batch_size, len(chunks))])
            progress(done / total, f"{done:,}/{total:,} tokens, {time.time() - t0:.0f} s")
    chunk_start = np.repeat(starts[:-1], [len(c) for c in chunks]).astype(np.int64)
    meta = {"format": FORMAT, "model": lm.name, "n_tokens": n_tokens, "seq_len": seq_len, "top": top,
            "n_positions": total, "layers": L, "d_ff": d_ff, "corpus": corpus.NOTICE, "split": "valid",
            "seconds": round(time.time() - t0, 2)}
    return TriggerIndex(meta, best_v.numpy().astype(np.float32), best_g.numpy().astype(np.int32),
                        np.concatenate([np.asarray(c, dtype=np.int64) for c in chunks]), chunk_start)


def save_index(index: TriggerIndex, path: Path) -> None:
    """Atomic write (editkit/core/cache.py)."""
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, meta=np.frombuffer(json.dumps(index.meta).encode(), dtype=np.uint8), values=index.values,
                     where=index.where, tokens=index.tokens, chunk_start=index.chunk_start)

    index.path = atomic_write(path, write)


_loaded: dict = {}


def load_index(path: Path, expect: dict) -> TriggerIndex | None:
    """The cached index, or None when missing, unreadable or not matching `expect` (then it is rebuilt)."""
    if not path.exists():
        return None
    stamp = (str(path), path.stat().st_mtime_ns, path.stat().st_size)
    hit = _loaded.get(stamp)  # one read: another thread may clear the memo between a test and a lookup
    if hit is not None:
        return hit
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            index = TriggerIndex(meta, z["values"], z["where"], z["tokens"], z["chunk_start"], path)
        L, d_ff = meta["layers"], meta["d_ff"]
        ok = (all(meta.get(k) == v for k, v in expect.items())
              and index.values.shape == index.where.shape == (L, meta["top"], d_ff)
              and len(index.tokens) == len(index.chunk_start) == meta["n_positions"]
              and (index.where.size == 0 or (index.where.min() >= 0 and index.where.max() < len(index.tokens))))
    except Exception:  # noqa: BLE001 - any unreadable file is rebuilt
        return None
    if not ok:
        return None
    _loaded.clear()  # keep the last index only (another thread's clear in between costs a reload, nothing more)
    _loaded[stamp] = index
    return index


def get_index(lm, n_tokens: int | None = None, seq_len: int = DEFAULT_SEQ_LEN, top: int = DEFAULT_TOP,
              progress=None, cache: bool = True) -> TriggerIndex:
    """The cached trigger index for `lm` (built and saved on first use, or when the file is corrupt; cache=False
    rebuilds and saves it). `progress(fraction, message)` follows a build."""
    n_tokens = int(n_tokens or default_n_tokens(lm))
    path = index_path(model_key(lm), n_tokens, seq_len, top)
    expect = {"format": FORMAT, "model": lm.name, "n_tokens": n_tokens, "seq_len": seq_len, "top": top,
              "layers": lm.adapter.n_layers, "d_ff": lm.adapter.d_ff}
    index = load_index(path, expect) if cache else None
    if index is None:
        index = build_index(lm, n_tokens, seq_len, top, progress=progress)
        save_index(index, path)
    return index


def cached_index(lm, n_tokens: int | None = None, seq_len: int = DEFAULT_SEQ_LEN, top: int = DEFAULT_TOP):
    """The cached index if it exists and is valid, else None (nothing is computed)."""
    n_tokens = int(n_tokens or default_n_tokens(lm))
    expect = {"format": FORMAT, "model": lm.name, "n_tokens": n_tokens, "seq_len": seq_len, "top": top,
              "layers": lm.adapter.n_layers, "d_ff": lm.adapter.d_ff}
    return load_index(index_path(model_key(lm), n_tokens, seq_len, top), expect)


def examples(lm, index: TriggerIndex, layer: int, memory: int, top: int | None = None,
             max_prefix_tokens: int = 48) -> list[TriggerExample]:
    """The top trigger examples of memory (layer, i), best first. Prefixes are cut to their last
    `max_prefix_tokens` tokens (marked with "…")."""
    layer = check_layer(lm, layer)
    memory = check_memory(lm, memory)
    top = index.top if top is None else top
    if top < 1:
        raise EditkitError("top must be at least 1")
    if top > index.top:
        raise EditkitError(f"the index keeps {index.top} examples per memory; asked for {top}")
    bos = lm.tok.bos_token_id
    out = []
    for r in range(top):
        coef = float(index.values[layer, r, memory])
        if not np.isfinite(coef):
            break
        g = int(index.where[layer, r, memory])
        s = int(index.chunk_start[g])
        prefix_ids = [int(t) for t in index.tokens[s:g] if int(t) != bos]
        cut = len(prefix_ids) > max_prefix_tokens
        prefix = ("…" if cut else "") + lm.tok.decode(prefix_ids[-max_prefix_tokens:])
        nxt = index.next_id(g)
        out.append(TriggerExample(layer, memory, label(layer, memory), r + 1, coef, prefix,
                                  lm.tok.decode([int(index.tokens[g])]),
                                  None if nxt is None else lm.tok.decode([nxt]), g))
    return out


def trigger_examples(lm, layer: int, memory: int, top: int = DEFAULT_TOP, n_tokens: int | None = None,
                     seq_len: int = DEFAULT_SEQ_LEN, progress=None) -> list[TriggerExample]:
    """Top-`top` trigger examples of memory `memory` at `layer` (the index is built on first use)."""
    check_layer(lm, layer)
    check_memory(lm, memory)
    index = get_index(lm, n_tokens, seq_len, max(top, DEFAULT_TOP), progress=progress)
    return examples(lm, index, layer, memory, top)
