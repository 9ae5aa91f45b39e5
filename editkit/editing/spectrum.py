"""Why AlphaEdit's projection protects old knowledge: the spectrum of C = E[k k^T] at each edited layer.

Keys of ordinary text fill only part of the key space: most of C's eigenvalues are orders of magnitude below the
largest. AlphaEdit (methods/alphaedit.py) lets an edit act only in the directions with the smallest eigenvalues
(the null space), where ordinary keys have almost no component, so what the layer does on ordinary text is kept.
`spectrum` returns, per layer, the eigenvalues (largest first), the cut the null-space rule puts on them, the
null-space dimension and the share of E||k||^2 inside it, with what upstream's absolute 2e-2 would select for
comparison (JSON-serializable); figures/spectrum.py draws it.
"""
from __future__ import annotations

from .defaults import load_hparams
from .nullspace import NULL_RULES, eigen, null_dimension

UPSTREAM = ("absolute", 0.02)  # jianghoucheng/AlphaEdit hparams: nullspace_threshold 2e-2 for every model


def spectrum(lm, layers=None, rule: str | None = None, threshold: float | None = None,
             overrides: dict | None = None) -> dict:
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
        out.append({"layer": layer, "width": int(e.numel()), "eigenvalues": e.flip(0).tolist(),
                    "null_dimension": k, "cut": float(e[k - 1]) if k else None,
                    "null_energy": float(e[:k].sum()) / total if k and total else 0.0,
                    "largest": float(e[-1]), "mean": total / e.numel(),
                    "upstream_null_dimension": k_up,
                    "upstream_null_energy": float(e[:k_up].sum()) / total if k_up and total else 0.0})
    return {"model": lm.name, "rule": hp.nullspace_rule, "threshold": hp.nullspace_threshold,
            "rule_meaning": NULL_RULES[hp.nullspace_rule], "projection": hp.projection,
            "statistics_tokens": hp.mom2_n_tokens,
            "upstream": {"rule": UPSTREAM[0], "threshold": UPSTREAM[1], "meaning": NULL_RULES[UPSTREAM[0]]},
            "layers": out}

