"""Norm-anchor scaling (NAS; Liu et al., "Norm Anchors Make Model Edits Last", arXiv 2602.02543, code
SasyaTitech/NAS `NAS/compute_z.py`, `util/vstar_stats.py`): rescale each solved value vector to a reference norm
taken from the original model before it is written, which breaks the feedback loop in which value vectors and
edited weights grow each other's norms over a sequence of edits. The paper's one-line rule (Sec. 4, NAS):

    v* <- n_bar * v* / ||v*||,

with n_bar the mean ||v*|| of ordinary edits on the unedited model (upstream: 1,000 CounterFact requests, norms
above the 95th percentile dropped). Upstream also skips an edit whose ||v*|| exceeds a multiple of n_bar (v* = v0:
2 for MEMIT-style residual targets, 5 for ROME); `nas_skip_factor` 0 never skips.

The value vector is what the MLP writes at the edit site: for ROME and PMET the MLP output target itself; for
residual targets (MEMIT, AlphaEdit) z = h + delta, v* = v0 + delta with v0 what the MLP adds to the residual at
the last critical layer (site mlp_write, after Gemma's post-MLP norm), and the rescaled target is
z = (h - v0) + v*. Off unless hp.nas_anchor > 0; a method calls `anchor_targets` on its optimized targets.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.results import JsonObject, Result, frame
from .keys import site_output
from .targets import NasReport, Targets, optimize_targets_batch


@dataclass
class AnchorEstimate(Result):
    """NAS's n_bar (`anchor`): the mean ||v*|| of `n` edits' value vectors, norms above `quantile` dropped (`kept`
    remain); `norms` each edit's ||v*||, and from `anchor_from_edits` the `method` and each target shift ||v* - v||
    (`shift_norms`, what the shift bound v_max_norm bounds)."""

    anchor: float
    n: int
    kept: int
    norms: list[float]
    quantile: float = 0.95
    method: str | None = None
    shift_norms: list[float] | None = None

    _show = "table"

    def headline(self) -> str:
        return f"n_bar = {self.anchor:.4g}, the mean ||v*|| of {self.kept} of {self.n} edits"

    def to_json(self) -> JsonObject:
        if self.method is None:  # anchor_norm's form
            return {"anchor": self.anchor, "n": self.n, "kept": self.kept, "norms": self.norms}
        return {"method": self.method, "anchor": self.anchor, "n": self.n, "kept": self.kept,
                "quantile": self.quantile, "norms": self.norms, "shift_norms": self.shift_norms}

    @classmethod
    def _from_json(cls, d: dict) -> "AnchorEstimate":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    def to_frame(self):
        """One row per edit: ||v*|| and, where known, ||v* - v||."""
        shifts = self.shift_norms or [None] * len(self.norms)
        return frame([{"edit": i, "v_star_norm": v, "shift_norm": s}
                      for i, (v, s) in enumerate(zip(self.norms, shifts))])


def _values(lm, requests, opts: list[Targets], site: str, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(v*, v0) per request as rows: v0 is None for a target at the MLP output (v* is the target)."""
    if site == "resid_post":
        v0 = torch.stack([site_output(lm, "mlp_write", layer, r) for r in requests])
        delta = torch.stack([o.at(site).delta for o in opts])
        return v0 + delta, v0
    return torch.stack([o.at(site).target for o in opts]), None


def anchor_targets(lm, requests, opts: list[Targets], site: str, layer: int, hp) -> list[Targets]:
    """`opts` with every request's value vector rescaled to hp.nas_anchor (new Targets: `opts` may be memoized),
    ||v*|| before, the norm written and whether the edit was skipped in their `nas`. `opts` itself when
    hp.nas_anchor is 0 (off)."""
    if not hp.nas_anchor > 0:
        return opts
    v_star, v0 = _values(lm, requests, opts, site, layer)
    norms = v_star.norm(dim=1, keepdim=True)
    skip = (hp.nas_skip_factor > 0) & (norms > hp.nas_skip_factor * hp.nas_anchor)
    scaled = torch.where(norms > 0, v_star * (hp.nas_anchor / norms.clamp_min(1e-12)), v_star)  # NAS Sec. 4
    out = []
    for j, o in enumerate(opts):
        t, skipped = o.at(site), bool(skip[j])
        unchanged = t.init if v0 is None else v0[j]  # the value the MLP writes without the edit
        if skipped:  # v* = v0: the target is left where it started
            new, written = t.init, float(unchanged.norm())
        else:
            new, written = (scaled[j] if v0 is None else t.init - v0[j] + scaled[j]), hp.nas_anchor
        new = new.to(t.target.dtype)
        # shift: ||v* - v||, what v_max_norm bounds
        out.append(o.with_target(site, new, NasReport(float(norms[j]), float(t.delta.norm()), skipped, written)))
    return out


def anchor_norm(lm, requests, layer: int, site: str, hp, adaptive: bool = False,
                quantile: float = 0.95) -> AnchorEstimate:
    """n_bar as upstream estimates it: the mean ||v*|| of the given requests' targets optimized on the weights this
    context sees (the original model), norms above `quantile` dropped."""
    opts = optimize_targets_batch(lm, list(requests), layer, (site,) if not adaptive else ("attn_out", site), hp,
                                  adaptive=adaptive)
    v_star, _ = _values(lm, requests, opts, site, layer)
    norms = v_star.norm(dim=1)
    cut = torch.quantile(norms.double(), quantile)
    kept = norms[norms.double() <= cut]
    return AnchorEstimate(float(kept.mean()), len(norms), len(kept), [float(x) for x in norms], quantile)
