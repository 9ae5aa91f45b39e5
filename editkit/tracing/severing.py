"""Severing (Meng et al. 2022, Fig. 4 / kmeng01/rome `trace_with_repatch`): restore one hidden state h_t^l, but
keep the MLP (or attention) outputs at token t frozen at their corrupted values in every later layer l' > l.

If the restored state's effect collapses when the MLPs are frozen, the later MLPs at that token carry the
decisive computation; ROME finds this for the last subject token in early-to-middle layers.

The exact engine computes it (engine.severing_restores: each point is a restoration with "corrupt" patches), and
the "none" curve is the hidden heatmap's row at that token: pass it (`hidden`) to reuse it instead of recomputing.
"""
from __future__ import annotations

from ..core.errors import EditkitError
from .engine import score_restorations, severing_restores
from .setup import TraceSetup


def sever(lm, setup: TraceSetup, token: int | None = None, hidden: list | None = None, progress=None) -> dict:
    """Per layer, the restored score with nothing, the MLPs, or the attention frozen after it, at `token`
    (default: the last subject token). `hidden`: the hidden heatmap's scores (tokens x layers), if known."""
    L = lm.adapter.n_layers
    token = setup.subject_range[1] - 1 if token is None else token
    if not isinstance(token, int) or not 0 <= token < len(setup.tokens):
        raise EditkitError(f"token must be an integer between 0 and {len(setup.tokens) - 1}")
    restores = [r for frozen in ("mlp", "attn") for r in severing_restores(setup, token, frozen, L)]
    if hidden is None:
        restores += severing_restores(setup, token, "none", L)
    scores = score_restorations(lm, setup, restores, progress).tolist()
    return {"token": token, "token_str": setup.tokens[token], "layers": list(range(L)),
            "none": list(hidden[token]) if hidden is not None else scores[2 * L:],
            "mlp": scores[:L], "attn": scores[L:2 * L],
            "low_score": setup.low_score, "high_score": setup.high_score}
