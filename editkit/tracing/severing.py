"""Severing (Meng et al. 2022, Fig. 4 / kmeng01/rome `trace_with_repatch`): restore one hidden state h_t^l, but
keep the MLP (or attention) outputs at token t frozen at their corrupted values in every later layer l' > l.

If the restored state's effect collapses when the MLPs are frozen, the later MLPs at that token carry the
decisive computation; ROME finds this for the last subject token in early-to-middle layers.

The exact engine computes it (engine.severing_restores: each point is a restoration with "corrupt" patches), and
the "none" curve is the hidden heatmap's row at that token: pass it (`hidden`) to reuse it instead of recomputing.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..core.errors import EditkitError
from ..core.results import JsonObject, Result, frame
from ..figures.tracing import severing_figure
from .engine import score_restorations, severing_restores
from .setup import TraceSetup


@dataclass
class Severing(Result):
    """ROME's Fig. 4 at one token: per layer l, p(answer) with the hidden state h_token^l restored and nothing
    (`none`), the MLPs (`mlp`) or the attention (`attn`) frozen at their corrupted values in every later layer."""

    token: int
    token_str: str
    layers: list[int]
    none: list[float]
    mlp: list[float]
    attn: list[float]
    low_score: float
    high_score: float
    precision: str = "float32"  # the engine's; "bfloat16" is its fast mode, an approximation (engine.py)

    def headline(self) -> str:
        l = max(self.layers, key=lambda i: self.none[i] - self.mlp[i])
        return (f"at {self.token_str!r}, layer {l}: restored {self.none[l]:.3f}, MLPs severed {self.mlp[l]:.3f}, "
                f"attention severed {self.attn[l]:.3f} (corrupted {self.low_score:.3f})")

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def _from_json(cls, d: dict) -> "Severing":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})  # a default only for precision

    def figure(self):
        """The three curves over the restored layer, the corrupted p dotted (the tracing page's chart)."""
        return severing_figure(self.to_json())

    def to_frame(self):
        """One row per layer: layer, none, mlp, attn."""
        return frame([{"layer": l, "none": self.none[i], "mlp": self.mlp[i], "attn": self.attn[i]}
                      for i, l in enumerate(self.layers)])


def sever(lm, setup: TraceSetup, token: int | None = None, hidden: list | None = None,
          progress=None, precision: str = "float32") -> Severing:
    """Per layer, the restored score with nothing, the MLPs, or the attention frozen after it, at `token`
    (default: the last subject token). `hidden`: the hidden heatmap's scores (tokens x layers), if known.
    `precision`: the engine's (engine.py; "bfloat16" is its fast mode)."""
    L = lm.adapter.n_layers
    token = setup.subject_range[1] - 1 if token is None else token
    if not isinstance(token, int) or not 0 <= token < len(setup.tokens):
        raise EditkitError(f"token must be an integer between 0 and {len(setup.tokens) - 1}")
    restores = [r for frozen in ("mlp", "attn") for r in severing_restores(setup, token, frozen, L)]
    if hidden is None:
        restores += severing_restores(setup, token, "none", L)
    scores = score_restorations(lm, setup, restores, progress, precision=precision).tolist()
    return Severing(token, setup.tokens[token], list(range(L)),
                    list(hidden[token]) if hidden is not None else scores[2 * L:], scores[:L], scores[L:2 * L],
                    setup.low_score, setup.high_score, precision)
