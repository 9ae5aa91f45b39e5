"""The reference algorithm, as kmeng01/rome's `trace_with_patch`: one forward of n + 1 rows per restored state.

Row 0 runs clean; rows 1..n get noise on the subject embeddings; the restored state(s) in rows 1..n are overwritten
with row 0's values at the same token; the score is the answer's softmax probability at the last position,
averaged over rows 1..n. Slow and simple: the fast engine (engine.py) must reproduce these numbers.

`last_only=True` is the same algorithm with logits computed only at the last position (the one the score reads),
a cheaper baseline the benchmark also reports: on a 262k-token vocabulary the all-position logits of ROME's code
are about half of its time.
"""
from __future__ import annotations

import torch

from ..model.sites import site
from .setup import TraceSetup, corrupt_embeddings, window_layers
from .spec import check_kind


@torch.no_grad()
def trace_with_patch(lm, setup: TraceSetup, states: list[tuple[int, str, int]],
                     frozen: list[tuple[int, str, int]] = (), last_only: bool = False) -> float:
    """Score with `states` [(token, kind, layer)] restored from the clean row and `frozen` states held at their
    corrupted values (ROME's trace_with_repatch, for severing)."""
    n = setup.n
    ids = setup.input_ids.repeat(n + 1, 1)

    def edit(hooks):
        hooks.set("embed", corrupt_embeddings(setup, rows=slice(1, None)))
        by_site: dict = {}
        for token, kind, layer in states:
            by_site.setdefault(site(kind, layer), []).append(token)
        for where, tokens in by_site.items():
            def restore(h, tokens=tokens):
                h = h.clone()
                h[1:, tokens] = h[0, tokens]
                return h
            hooks.set(where, restore)
        for token, kind, layer in frozen:
            values = setup.state(kind, layer)[:, token]

            def freeze(h, token=token, values=values):
                h = h.clone()
                h[1:, token] = values.to(h.dtype)
                return h
            hooks.set(site(kind, layer), freeze)

    if last_only:
        hidden = lm.runner.read({}, full=True, edit=edit, input_ids=ids).hidden
        logits = lm.runner.logits(hidden[:, -1], norm=False)
    else:  # ROME's logits at every position, the last one read
        logits = lm.runner.full_logits(edit=edit, input_ids=ids)[:, -1]
    probs = torch.softmax(logits, -1)[1:, setup.answer_id]
    return float(probs.mean())


def reference_trace(lm, setup: TraceSetup, kind: str, window: int = 10, progress=None,
                    last_only: bool = False) -> torch.Tensor:
    """Scores (tokens, layers) for one kind, one forward per cell."""
    check_kind(kind)
    n_tokens, n_layers = setup.input_ids.shape[1], lm.adapter.n_layers
    scores = torch.zeros(n_tokens, n_layers)
    for t in range(n_tokens):
        for l in range(n_layers):
            layers = [l] if kind == "hidden" else list(window_layers(l, window, n_layers))
            scores[t, l] = trace_with_patch(lm, setup, [(t, kind, j) for j in layers], last_only=last_only)
        if progress:
            progress((t + 1) / n_tokens, f"token {t + 1}/{n_tokens}")
    return scores
