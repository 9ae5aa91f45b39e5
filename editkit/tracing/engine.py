"""The fast causal-tracing engine: the same scores as reference.py, far fewer FLOPs.

Why it is exact: a restoration at layer l leaves every computation below l identical to the corrupted run.
So instead of one full (n + 1)-row forward per cell, the engine
1. runs the clean and the corrupted pass once (setup.prepare), keeping every block's input/output and every
   attention/MLP output, and the keyword arguments the model passes to each block (rotary embeddings, masks);
2. for each starting layer, stacks the corrupted residual for many restorations (n rows per restored token) into
   one batch and runs only the blocks from that layer up, calling the model's own decoder blocks;
3. computes the final norm and unembedding at the last position only (for Gemma's 262k-token vocabulary this
   alone is most of the reference cost);
4. skips restorations that cannot change anything: a state at a token before the subject is identical in the
   clean and the corrupted run (noise touches only subject tokens and attention is causal), so its score is the
   corrupted score exactly; so is a last-layer hidden state at any token but the last, which no later layer reads;
5. computes the tokens before the subject once: their keys and values are the same in every run, so each forward
   runs only the positions from the subject on, attending to a cached prefix (setup.prefix_cache).
"""
from __future__ import annotations

import torch

from ..hooks import Hooks
from ..sites import site
from .setup import TraceSetup, answer_prob, check_kind, window_layers

MAX_ROWS = 256  # rows per forward (memory/speed trade-off on CPU)


@torch.no_grad()
def run_from(lm, setup: TraceSetup, start: int, h: torch.Tensor, patches: list | None = None) -> torch.Tensor:
    """Run blocks start..L-1 on residuals h (B, T, d) and return p(answer) at the last position, (B,).

    `patches`: [(site, rows, token_positions, values)] overwriting the site's tensor at (rows[i], positions[i])
    with values[i] during the run. Positions before setup.prefix_len must hold their (shared) prefix values in h;
    only the positions after them are computed, on top of the cached prefix keys and values.
    """
    P = setup.prefix_len
    if P and any(bool((positions < P).any()) for _, _, positions, _ in patches or []):
        P = 0  # a patch inside the prefix: run every position
    with Hooks(lm) as hooks:
        for where, rows, positions, values in patches or []:
            def fn(out, rows=rows, positions=positions - P, values=values):
                out = out.clone()
                out[rows, positions] = values.to(out.dtype)
                return out
            hooks.set(where, fn)
        if P:
            h = lm.runner.run_blocks(h[:, P:], start, setup.suffix_calls, kv=setup.prefix_kv.rows(h.shape[0]))
        else:
            h = lm.runner.run_blocks(h, start, setup.calls)
    return answer_prob(lm, h[:, -1], setup.answer_id)


def _batched(lm, setup, start, jobs, build):
    """Evaluate jobs (each -> n rows) in chunks of MAX_ROWS rows; returns the mean score per job."""
    n = setup.n
    per = max(1, MAX_ROWS // n)
    out = []
    for i in range(0, len(jobs), per):
        chunk = jobs[i:i + per]
        h, patches = build(chunk)
        probs = run_from(lm, setup, start, h, patches)
        out += probs.view(len(chunk), n).mean(1).tolist()
    return out


def fast_trace(lm, setup: TraceSetup, kind: str, window: int = 10, progress=None) -> torch.Tensor:
    """Scores (tokens, layers) for one kind; equal to reference_trace up to float rounding."""
    check_kind(kind)
    n, (b, _) = setup.n, setup.subject_range
    n_tokens, n_layers = setup.input_ids.shape[1], lm.adapter.n_layers
    scores = torch.full((n_tokens, n_layers), setup.low_score)
    tokens = list(range(b, n_tokens))  # tokens before the subject keep the corrupted score
    rows_of = lambda i: torch.arange(i * n, (i + 1) * n)  # noqa: E731

    for l in range(n_layers):
        if kind == "hidden":
            # Restore block l's output at token t, then run blocks l+1.. from there.
            def build(chunk, l=l):
                h = setup.state("hidden", l).repeat(len(chunk), 1, 1)
                for i, t in enumerate(chunk):
                    h[rows_of(i), t] = setup.state("hidden", l, "clean")[0, t]
                return h, []
            if l == n_layers - 1:
                # No block reads the last layer's output at an earlier token: only the last token can change.
                scores[b:-1, l] = setup.low_score
                scores[-1, l] = float(_batched(lm, setup, l + 1, [n_tokens - 1], build)[0])
                if progress:
                    progress(1.0)
                continue
            vals = _batched(lm, setup, l + 1, tokens, build)
        else:
            # Restore the module outputs at token t over the window; start at the window's first layer.
            layers = list(window_layers(l, window, n_layers))
            first = layers[0]

            def build(chunk, layers=layers, first=first):
                h = setup.block_input(first).repeat(len(chunk), 1, 1)
                rows = torch.cat([rows_of(i) for i in range(len(chunk))])
                positions = torch.tensor(chunk).repeat_interleave(n)
                patches = []
                for j in layers:
                    clean = setup.state(kind, j, "clean")[0]  # (T, d)
                    patches.append((site(kind, j), rows, positions, clean[positions]))
                return h, patches
            vals = _batched(lm, setup, first, tokens, build)
        scores[b:, l] = torch.tensor(vals)
        if progress:
            progress((l + 1) / n_layers)
    return scores
