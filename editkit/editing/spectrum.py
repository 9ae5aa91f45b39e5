"""Why AlphaEdit's projection protects old knowledge: the spectrum of C = E[k k^T] at each edited layer.

Keys of ordinary text fill only part of the key space: most of C's eigenvalues are orders of magnitude below the
largest. AlphaEdit (methods/alphaedit.py) lets an edit act only in the directions with the smallest eigenvalues
(the null space), where ordinary keys have almost no component, so what the layer does on ordinary text is kept.
`spectrum` returns, per layer, the eigenvalues (largest first), the cut the null-space rule puts on them, the
null-space dimension and the share of E||k||^2 inside it, with what upstream's absolute 2e-2 would select for
comparison; figures/spectrum.py draws it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..core.results import JsonObject, Result, frame
from ..figures.spectrum import spectrum_figure
from .defaults import load_hparams
from .nullspace import NULL_RULES, eigen, null_dimension

UPSTREAM = ("absolute", 0.02)  # jianghoucheng/AlphaEdit hparams: nullspace_threshold 2e-2 for every model


@dataclass
class LayerSpectrum:
    """One layer: C's eigenvalues (largest first), the null space the rule selects (its dimension, the cut
    eigenvalue, its share of E||k||^2) and what upstream's absolute 2e-2 would select."""

    layer: int
    width: int
    eigenvalues: list[float]
    null_dimension: int
    cut: float | None
    null_energy: float
    largest: float
    mean: float
    upstream_null_dimension: int
    upstream_null_energy: float


@dataclass
class Spectrum(Result):
    """The spectrum of C at AlphaEdit's layers and the null space its rule selects (module docstring)."""

    model: str
    rule: str
    threshold: float
    rule_meaning: str
    projection: str
    statistics_tokens: int
    upstream: dict
    layers: list[LayerSpectrum]
    extra: dict = field(default_factory=dict)  # what a caller added to the JSON (the CLI's print_eigenvalues)

    def headline(self) -> str:
        return f"{self.model}: " + "; ".join(f"layer {r.layer} null space {r.null_dimension}/{r.width}"
                                              for r in self.layers)

    def to_json(self) -> JsonObject:
        d = asdict(self)
        return {**{k: v for k, v in d.items() if k != "extra"}, **self.extra}

    @classmethod
    def _from_json(cls, d: dict) -> "Spectrum":
        names = set(cls.__dataclass_fields__) - {"extra", "layers"}
        return cls(**{k: d[k] for k in names}, layers=[LayerSpectrum(**r) for r in d["layers"]],
                   extra={k: v for k, v in d.items() if k not in cls.__dataclass_fields__})

    def to_frame(self):
        """One row per layer (the eigenvalues left out)."""
        return frame([{k: v for k, v in asdict(r).items() if k != "eigenvalues"} for r in self.layers])

    def figure(self):
        """Eigenvalues per layer on a log scale, the null-space cut dashed and the null space shaded."""
        return spectrum_figure(self.to_json())


def spectrum(lm, layers=None, rule: str | None = None, threshold: float | None = None,
             overrides: dict | None = None) -> Spectrum:
    """The spectrum of C at `layers` (default: AlphaEdit's edited layers for this model) with the null space that
    `rule` and `threshold` (default: the model's AlphaEdit hyperparameters) select."""
    changes = dict(overrides or {})
    if rule is not None:
        changes["nullspace_rule"] = rule
    if threshold is not None:
        changes["nullspace_threshold"] = threshold
    if layers is not None:
        changes["layers"] = sorted(set(int(l) for l in layers))
    hp = load_hparams("alphaedit", lm, changes)  # validates the rule, threshold and layers
    out = []
    for layer in hp.layers:
        e, _ = eigen(lm, layer, hp.mom2_n_tokens)
        e = e.clamp_min(0)  # C is PSD; rounding leaves tiny negative eigenvalues
        k = null_dimension(e, hp.nullspace_rule, hp.nullspace_threshold)
        k_up = null_dimension(e, *UPSTREAM)
        total = float(e.sum())
        out.append(LayerSpectrum(layer, int(e.numel()), e.flip(0).tolist(), k, float(e[k - 1]) if k else None,
                                 float(e[:k].sum()) / total if k and total else 0.0, float(e[-1]), total / e.numel(),
                                 k_up, float(e[:k_up].sum()) / total if k_up and total else 0.0))
    return Spectrum(lm.name, hp.nullspace_rule, hp.nullspace_threshold, NULL_RULES[hp.nullspace_rule], hp.projection,
                    hp.mom2_n_tokens,
                    {"rule": UPSTREAM[0], "threshold": UPSTREAM[1], "meaning": NULL_RULES[UPSTREAM[0]]}, out)

