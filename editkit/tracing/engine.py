"""The exact causal-tracing engine: the same scores as reference.py (ROME's algorithm), far less work.

Every cell of a heatmap (and every point of the severing chart) is a *restoration*: on each of the n corrupted runs,
some states at ONE token t are overwritten (with their clean values, or, for severing, frozen at the run's own
corrupted values), and the score is p(answer) at the last position, averaged over the n runs. The engine computes
exactly that, with these savings (none of them changes a number beyond float rounding):

1. Causality. Noise touches only subject tokens and attention is causal, so a restoration at token t leaves every
   position before t exactly as in its sample's corrupted run, at every layer. A restoration therefore computes only
   positions t..T-1, attending to the corrupted sample's own keys/values of positions < t (setup.corrupt_kv).
   Cells at tokens before the subject restore nothing (clean = corrupted there): their score is the corrupted score.
2. Lower layers. A restoration whose first change is at block l starts at block l: the residual entering it is the
   corrupted run's (setup.corrupt), with the restored hidden state put in at token t.
3. One step per block. All restorations at the same token t (n rows each) are stepped through the layers together,
   block by block (runner.step): at block j, the rows of restorations that start at j join the batch, so every
   block runs one large batch instead of one small forward per cell.
4. Shared prefixes. Two rows that have had the same input and the same patches so far hold the same state, so they
   are computed once and split where their patches differ (a prefix tree of patched chains): the MLP/attention
   windows that start at layer 0 share their lower layers, and severing's "none" curve is the hidden panel's cells.
5. Batched unembedding. Only the last position's final residual is projected to the vocabulary (the score reads
   nothing else), and the rows of all restorations are projected together (runner.answer_logprob): the vocabulary
   is walked in blocks of 4096 tokens for all rows at once with an online logsumexp, so Gemma's 671 MB unembedding
   matrix is read once per panel, each block's logits are exponentiated while still in the CPU cache, and
   p = exp(z_answer - logsumexp(z)) writes no (rows x vocabulary) matrix.

Exactness: the engine's scores equal ROME's algorithm up to float32 rounding (< 1e-7 on the tiny test models). On
Gemma's 262k-token vocabulary the reference's own float32 softmax rounds the sum of exponentials to ~7e-5 relative,
while the engine's p is within ~4e-6 of float64 (the rounding of the float32 logits themselves), so the two differ
by up to ~1e-5 where p is large; `bench trace` reports both errors.

    scores = score_restorations(lm, setup, [Restore(token=3, start=5, hidden=True)])   # h_3^(4) restored
    fast_trace(lm, setup, "mlp", window=10)                                   # one heatmap, (T, L)

Fast mode (`precision="bfloat16"`, an approximation offered where a student explores): the restored runs' matmuls
in bfloat16 (torch.autocast: linear maps and attention in bf16 with float32 accumulation; the residual stream, the
norms and the clean and corrupted runs of the setup stay float32) and the projection to the vocabulary in bf16
matmuls (vocab.vocab_pass_bf16). bf16 matmuls run at 2.2-2.5x the float32 rate on this CPU, the norms, softmax
and residual stream at the float32 rate, so a panel takes about 0.6x the exact engine's time (docs/results/speed.md);
its largest score difference from the exact engine is measured over known facts (tracing/bench.py, fast_mode_error)
and shown beside every fast figure.

`Work` counts the multiply-accumulates and times of blocks and unembedding, for the benchmark's GMAC/s.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from ..core.errors import EditkitError
from ..model.hooks import Hooks
from ..model.sites import site
from .setup import TraceSetup, window_layers
from .spec import check_kind, check_precision

MAX_POSITION_ROWS = 1 << 15  # rows x positions per block step (memory bound for long prompts; Space Needle: <= 1,800)


def _matmuls(precision: str):
    """The context the restored runs' blocks compute in: float32 as they are, or bf16 matmuls (fast mode)."""
    return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bfloat16" else nullcontext()


@dataclass(frozen=True)
class Restore:
    """One restoration, applied to every corrupted sample.

    token:   the token t whose states are overwritten (positions before it are never touched)
    start:   the first block to run (blocks below it are the corrupted run's)
    hidden:  the residual entering block `start` at t is the clean one (ROME's hidden state h_t^(start-1))
    patches: ((kind, layer, source), ...): the output of kind "mlp"/"attn"/"hidden" at that layer and token t is
             replaced by its clean value (source "clean") or held at the sample's corrupted value ("corrupt")
    """

    token: int
    start: int
    hidden: bool = False
    patches: tuple = ()


@dataclass
class Work:
    """What an evaluation computed: multiply-accumulates (linear maps only) and seconds, blocks and unembedding."""

    block_macs: float = 0.0
    block_s: float = 0.0
    unembed_macs: float = 0.0
    unembed_s: float = 0.0
    block_rows: int = 0  # rows x positions stepped through one block, summed
    unembed_rows: int = 0
    restorations: int = 0
    per_group: dict = field(default_factory=dict)

    def add(self, other: "Work") -> None:
        for name in ("block_macs", "block_s", "unembed_macs", "unembed_s", "block_rows", "unembed_rows",
                     "restorations"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_dict(self) -> dict:
        gmacs = lambda macs, s: round(macs / s / 1e9, 1) if s > 0 else None  # noqa: E731
        return {"block_gmac": round(self.block_macs / 1e9, 1), "block_s": round(self.block_s, 2),
                "block_gmac_per_s": gmacs(self.block_macs, self.block_s),
                "unembed_gmac": round(self.unembed_macs / 1e9, 1), "unembed_s": round(self.unembed_s, 2),
                "unembed_gmac_per_s": gmacs(self.unembed_macs, self.unembed_s),
                "block_rows": self.block_rows, "unembed_rows": self.unembed_rows,
                "restorations": self.restorations}


def block_macs_per_token(lm, layer: int) -> int:
    """Multiply-accumulates of block `layer`'s linear maps for one token (the sum of its 2-D weights' sizes; the
    attention scores, 2 x heads x head_dim x context per token, are under 1% on short prompts and not counted)."""
    return sum(p.numel() for p in lm.adapter.block(layer).parameters() if p.dim() == 2)


def known_low(setup: TraceSetup, r: Restore, n_layers: int) -> bool:
    """True when the restoration provably changes nothing the score reads: its score is the corrupted score.
    Tokens before the subject have the same states clean and corrupted; a restoration that starts after the last
    block at a token other than the last leaves the last position's final state as it was."""
    T = setup.input_ids.shape[1]
    if r.token < setup.subject_range[0]:
        return True
    return r.start >= n_layers and r.token < T - 1 and not r.patches


@torch.no_grad()
def score_restorations(lm, setup: TraceSetup, restores: list[Restore], progress=None,
                       work: Work | None = None, precision: str = "float32") -> torch.Tensor:
    """Mean p(answer) over the corrupted samples for each restoration (a float tensor, one value per restoration).
    `progress(fraction, message)` is called after every block step and before and after the projection to the
    vocabulary; an exception it raises (e.g. Cancelled) ends the computation. `precision` "bfloat16": fast mode
    (module docstring)."""
    check_precision(precision)
    n, L = setup.n, lm.adapter.n_layers
    for r in restores:
        if not 0 <= r.token < setup.input_ids.shape[1] or not 0 <= r.start <= L or \
                any(not r.start <= l < L or src not in ("clean", "corrupt") for _, l, src in r.patches):
            raise EditkitError(f"restoration out of range: {r}")
    work = work if work is not None else Work()
    work.restorations += len(restores)
    out = torch.full((len(restores),), float("nan"))
    todo = []
    for i, r in enumerate(restores):
        if known_low(setup, r, L):
            out[i] = setup.low_score
        else:
            todo.append(i)
    if not todo:
        return out
    parts = _batches(setup, restores, todo)
    # progress: one unit per block step; the unembedding counts as much as all steps (on Gemma's 262k vocabulary
    # it costs about as many multiply-accumulates as the blocks)
    steps = sum(L - min(restores[i].start for i in part) for _, part in parts)
    total = 2 * max(steps, 1)
    done = [0]

    def tick():
        done[0] += 1
        if progress:
            progress(min(done[0] / total, 1.0), f"block steps {done[0]}/{steps}")

    finals, chain_rows = [], {}
    offset = 0
    for t, part in parts:
        chains = [(restores[i], s) for i in part for s in range(n)]
        with _matmuls(precision):
            final, node = _run_group(lm, setup, t, chains, work, tick)
        finals.append(final)
        for k, i in enumerate(part):
            chain_rows[i] = [offset + node[k * n + s] for s in range(n)]
        offset += final.shape[0]
    final = torch.cat(finals)
    if progress:
        progress(steps / total, "p(answer) over the vocabulary")  # also checks a cancel flag before the projection
    # the restored runs may leave bf16 rows (fast mode); the final norm wants the model's own dtype (a LayerNorm
    # refuses mixed dtypes, and a float64 or half-precision model's states must stay in theirs)
    p = _answer_probs(lm, setup, final.to(lm.dtype), work, precision == "bfloat16")
    for i, members in chain_rows.items():
        out[i] = p[members].mean()
    if progress:
        progress(1.0, "done")
    return out


def _batches(setup: TraceSetup, restores: list[Restore], todo: list[int]) -> list[tuple[int, list[int]]]:
    """(token, restorations) batches: the restorations of one token together, split to bound rows x positions;
    in start order, so that windows sharing their lower layers stay in one batch."""
    groups: dict[int, list[int]] = {}
    for i in todo:
        groups.setdefault(restores[i].token, []).append(i)
    parts = []
    for t, idx in sorted(groups.items()):
        idx = sorted(idx, key=lambda i: (restores[i].start, restores[i].patches))
        per = max(1, MAX_POSITION_ROWS // (setup.n * (setup.input_ids.shape[1] - t)))
        parts += [(t, idx[i:i + per]) for i in range(0, len(idx), per)]
    return parts


def _answer_probs(lm, setup, final, work: Work, fast: bool = False) -> torch.Tensor:
    """p(answer) of final residuals (N, d): every row at once, the vocabulary in blocks (runner.answer_logprob;
    `fast`: bf16 matmuls)."""
    t0 = time.perf_counter()
    p = lm.runner.answer_logprob(final, setup.answer_id, fast=fast).exp()
    work.unembed_s += time.perf_counter() - t0
    work.unembed_macs += float(final.shape[0]) * lm.adapter.d_model * lm.adapter.vocab_size
    work.unembed_rows += final.shape[0]
    return p


def _run_group(lm, setup: TraceSetup, t: int, chains: list, work: Work, tick) -> tuple[torch.Tensor, list[int]]:
    """Step every chain (restoration, sample) at token t through the blocks. Returns the distinct final residuals at
    the last position (nodes, d) and each chain's node."""
    L = lm.adapter.n_layers
    base = t if setup.corrupt_kv is not None else 0  # first position computed; positions before it are cached
    calls = setup.calls_after(lm, base) if any(r.start < L for r, _ in chains) else None
    node = [-1] * len(chains)
    h, samples = None, []
    for j in range(min(r.start for r, _ in chains), L + 1):
        # Each running chain joins a node: the same parent (or, entering here, the same sample and entry) and the
        # same patches at this block give the same state.
        index: dict = {}
        nodes: list[Node] = []
        for c, (r, s) in enumerate(chains):
            if r.start > j:
                continue
            patch = tuple(sorted((kind, src) for kind, l, src in r.patches if l == j))
            entry = r.start == j
            sig = (("new", s, r.hidden) if entry else ("old", node[c]), patch)
            if sig not in index:
                index[sig] = len(nodes)
                nodes.append(Node(entry, s if entry else samples[node[c]], None if entry else node[c],
                                  entry and r.hidden, patch))
            node[c] = index[sig]
        h_in = _inputs(setup, j, t, base, h, nodes)
        samples = [v.sample for v in nodes]
        if j == L:
            h = h_in
            break
        t0 = time.perf_counter()
        rows = torch.tensor(samples, device=h_in.device)
        with Hooks(lm) as hooks:
            _set_patches(hooks, setup, j, t, t - base, nodes)
            kv = None
            if base:
                kv = (setup.corrupt_kv.keys[j].index_select(0, rows)[:, :, :base],
                      setup.corrupt_kv.values[j].index_select(0, rows)[:, :, :base])
            h = lm.runner.step(h_in, j, calls, kv)
        work.block_s += time.perf_counter() - t0
        work.block_rows += h_in.shape[0] * h_in.shape[1]
        work.block_macs += float(h_in.shape[0] * h_in.shape[1]) * block_macs_per_token(lm, j)
        tick()
    return h[:, -1], node


@dataclass(frozen=True)
class Node:
    """One distinct state of a group at a block: where its input comes from and what the block patches."""

    entry: bool  # the chain(s) enter at this block (input from the corrupted run)
    sample: int  # the corrupted sample it continues
    parent: int | None  # the node it continues (its output is this node's input)
    hidden: bool  # entering with the clean residual at token t
    patch: tuple  # ((kind, source), ...) at this block


def _inputs(setup, j, t, base, h, nodes: list[Node]) -> torch.Tensor:
    """The residuals entering block j (positions base..T-1) of each node: the parent's output, or for a chain
    entering here, its sample's corrupted residual, with the clean one at token t if it restores the hidden state."""
    corrupt = setup.block_input(j)
    h_in = torch.empty(len(nodes), corrupt.shape[1] - base, corrupt.shape[2], dtype=corrupt.dtype,
                       device=corrupt.device)
    old = [k for k, v in enumerate(nodes) if not v.entry]
    if old:
        h_in[old] = h[torch.tensor([nodes[k].parent for k in old])]
    new = [k for k, v in enumerate(nodes) if v.entry]
    if new:
        h_in[new] = corrupt[torch.tensor([nodes[k].sample for k in new]), base:]
    hidden = [k for k, v in enumerate(nodes) if v.hidden]
    if hidden:
        h_in[hidden, t - base] = setup.block_input(j, "clean")[0, t]
    return h_in


def _set_patches(hooks: Hooks, setup, j, t, pos, nodes: list[Node]) -> None:
    """One hook per patched site of block j: the nodes' outputs at token t (index pos) get their clean value or
    their sample's corrupted value."""
    by_kind: dict = {}
    for k, v in enumerate(nodes):
        for kind, src in v.patch:
            by_kind.setdefault(kind, []).append((k, src, v.sample))
    for kind, items in by_kind.items():
        clean = setup.state(kind, j, "clean")[0, t]
        rows = torch.tensor([k for k, _, _ in items], device=clean.device)
        corrupt = setup.state(kind, j)[:, t]
        values = torch.stack([clean if src == "clean" else corrupt[s] for _, src, s in items])

        def fn(out, rows=rows, values=values):
            out = out.clone()
            out[rows, pos] = values.to(out.dtype)
            return out
        hooks.set(site(kind, j), fn)


# --- the panels ------------------------------------------------------------------------------------------------
def panel(setup: TraceSetup, kind: str, window: int, n_layers: int) -> list[Restore]:
    """The restorations of one heatmap, row-major over (token, layer) (Meng et al. 2022, Sec. 2.1):
    hidden: h_t^(l) restored, blocks l+1.. run; mlp/attn: the module outputs at t over ROME's window around l."""
    check_kind(kind)
    T = setup.input_ids.shape[1]
    out = []
    for t in range(T):
        for l in range(n_layers):
            if kind == "hidden":
                out.append(Restore(t, l + 1, hidden=True))
            else:
                layers = window_layers(l, window, n_layers)
                out.append(Restore(t, layers[0], patches=tuple((kind, j, "clean") for j in layers)))
    return out


def severing_restores(setup: TraceSetup, token: int, frozen: str, n_layers: int) -> list[Restore]:
    """Per layer l: h_token^(l) restored while the `frozen` ("mlp"/"attn") outputs at the token stay at their
    corrupted values in every later layer (ROME's trace_with_repatch); frozen "none" is the hidden panel's row."""
    patches = lambda l: tuple((frozen, j, "corrupt") for j in range(l + 1, n_layers)) \
        if frozen != "none" else ()  # noqa: E731
    return [Restore(token, l + 1, hidden=True, patches=patches(l)) for l in range(n_layers)]


def fast_trace(lm, setup: TraceSetup, kind: str, window: int = 10, progress=None,
               work: Work | None = None, precision: str = "float32") -> torch.Tensor:
    """Scores (tokens, layers) for one kind; equal to reference_trace up to float rounding (float32), or its
    approximation in fast mode (precision "bfloat16")."""
    if not isinstance(window, int) or window < 1:
        raise EditkitError("window must be a positive integer")
    L = lm.adapter.n_layers
    scores = score_restorations(lm, setup, panel(setup, kind, window, L), progress, work, precision)
    return scores.view(setup.input_ids.shape[1], L)


def fast_traces(lm, setup: TraceSetup, kinds, window: int = 10, progress=None,
                work: Work | None = None, precision: str = "float32") -> dict[str, torch.Tensor]:
    """Several heatmaps in ONE schedule: every restoration of every kind at a token shares the block steps (larger
    batches) and the panels share one pass over the unembedding matrix; identical restorations are computed once.
    Returns kind -> scores (tokens, layers), equal to fast_trace per kind."""
    if not isinstance(window, int) or window < 1:
        raise EditkitError("window must be a positive integer")
    L, T = lm.adapter.n_layers, setup.input_ids.shape[1]
    kinds = list(kinds)
    restores = [r for kind in kinds for r in panel(setup, kind, window, L)]
    scores = score_restorations(lm, setup, restores, progress, work, precision)
    return {kind: scores[i * T * L:(i + 1) * T * L].view(T, L) for i, kind in enumerate(kinds)}
