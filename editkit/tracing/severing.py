"""Severing (Meng et al. 2022, Fig. 4 / kmeng01/rome `trace_with_repatch`): restore one hidden state h_t^l, but
keep the MLP (or attention) outputs at token t frozen at their corrupted values in every later layer l' > l.

If the restored state's effect collapses when the MLPs are frozen, the later MLPs at that token carry the
decisive computation; ROME finds this for the last subject token in early-to-middle layers.
"""
from __future__ import annotations

import torch

from .engine import run_from
from ..sites import site
from .setup import TraceSetup


@torch.no_grad()
def sever(lm, setup: TraceSetup, token: int | None = None) -> dict:
    """Per layer, the restored score with nothing, the MLPs, or the attention frozen after it, at `token`
    (default: the last subject token)."""
    n, n_layers = setup.n, lm.adapter.n_layers
    token = setup.subject_range[1] - 1 if token is None else token
    rows = torch.arange(n)
    positions = torch.full((n,), token)
    out = {"token": token, "token_str": setup.tokens[token], "layers": list(range(n_layers))}
    for frozen in ("none", "mlp", "attn"):
        scores = []
        for l in range(n_layers):
            h = setup.state("hidden", l).clone()
            h[:, token] = setup.state("hidden", l, "clean")[0, token]
            patches = []
            if frozen != "none":
                for j in range(l + 1, n_layers):
                    values = setup.state(frozen, j)[:, token]
                    patches.append((site(frozen, j), rows, positions, values))
            scores.append(float(run_from(lm, setup, l + 1, h, patches).mean()))
        out[frozen] = scores
    out["low_score"], out["high_score"] = setup.low_score, setup.high_score
    return out
