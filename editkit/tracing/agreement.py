"""How far the preview (attribution patching, attribution.py) is from the exact trace, per panel, over known
facts: the measurement a preview is shown with.

    python -m editkit bench preview --facts 20 --save assets/results/trace-preview-gemma-3-270m.json
    agreement_note("gemma-3-270m", "mlp")   # {"poor": ..., "text": "...", ...}: the shipped measurement

Per fact and panel, on the cells from the subject's first token on (before it both maps are the corrupted
score): Spearman's rank correlation and Pearson's correlation of the estimated and the exact scores, how many
of the exact map's 10 highest cells are among the estimate's 10 highest (top-10 overlap), and whether the two
peaks lie at the same token. A panel is poor when the estimate misses most of the exact top 10 on average
(mean overlap below POOR_OVERLAP) or puts its peak at another token than the exact map on most facts (share
below POOR_PEAK): there a reader would look at the wrong cells. The rule is fixed here, before any
measurement; the numbers are in docs/results/tracing.md.
"""
from __future__ import annotations

import json

import numpy as np
import torch

from ..core.paths import ASSETS
from .attribution import spearman

TOP = 10  # cells compared for the overlap
POOR_OVERLAP = 5.0  # mean top-10 overlap below this: most of the exact top cells missed
POOR_PEAK = 0.5  # share of facts whose estimated peak is at the exact peak's token, below this: poor
SHIPPED = ASSETS / "results"  # trace-preview-<model>.json


def compare(estimate, exact, first: int) -> dict:
    """The agreement of one estimated panel with its exact map (tokens x layers), on the rows `first`.. ."""
    a = torch.as_tensor(estimate, dtype=torch.float64)[first:]
    b = torch.as_tensor(exact, dtype=torch.float64)[first:]
    x, y = a.flatten().numpy(), b.flatten().numpy()
    pearson = float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 and y.std() > 0 else float("nan")
    k = min(TOP, x.size)
    best = [set(np.argsort(-v, kind="stable")[:k].tolist()) for v in (x, y)]
    top = len(best[0] & best[1])
    layers = a.shape[1]
    return {"spearman": round(spearman(a, b), 3), "pearson": round(pearson, 3), "top10_overlap": top,
            "peak_same_token": int(np.argmax(x)) // layers == int(np.argmax(y)) // layers,
            "peak_same_cell": int(np.argmax(x)) == int(np.argmax(y))}


def summarize(rows: list[dict], kinds) -> dict:
    """Per panel: the mean and smallest Spearman, the mean Pearson and top-10 overlap, the share of facts
    whose peaks share their token and cell, and the verdict (module docstring)."""
    out = {}
    for k in kinds:
        panels = [r["panels"][k] for r in rows]
        overlap = float(np.mean([p["top10_overlap"] for p in panels]))
        peak = float(np.mean([p["peak_same_token"] for p in panels]))
        out[k] = {"spearman_mean": round(float(np.nanmean([p["spearman"] for p in panels])), 3),
                  "spearman_min": round(float(np.nanmin([p["spearman"] for p in panels])), 3),
                  "pearson_mean": round(float(np.nanmean([p["pearson"] for p in panels])), 3),
                  "top10_overlap_mean": round(overlap, 2),
                  "peak_same_token": round(peak, 3),
                  "peak_same_cell": round(float(np.mean([p["peak_same_cell"] for p in panels])), 3),
                  "poor": overlap < POOR_OVERLAP or peak < POOR_PEAK}
    return out


def shipped(model: str) -> dict | None:
    """The measurement shipped for `model` (assets/results/trace-preview-<model>.json), or None."""
    try:
        return json.loads((SHIPPED / f"trace-preview-{model}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def agreement_note(model: str, kind: str) -> dict:
    """What a preview panel of `kind` on `model` is shown with: the shipped per-panel summary plus `text`, one
    sentence (and `poor`, None when nothing was measured on that model)."""
    m = shipped(model)
    if m is None or kind not in m.get("panels", {}):
        return {"poor": None, "text": f"The preview's agreement with the exact trace is not measured on "
                                      f"{model} (python -m editkit bench preview)."}
    s = m["panels"][kind]
    verdict = ("poor on this panel: read the exact trace" if s["poor"] else "a fair guide to where the exact "
               "trace peaks")
    text = (f"Preview of the {kind} panel, {verdict}: over {m['facts']} known facts it ranks cells with "
            f"Spearman {s['spearman_mean']:.2f} on average (smallest {s['spearman_min']:.2f}), finds "
            f"{s['top10_overlap_mean']:.1f} of the exact top 10 cells, and peaks at the exact peak's token "
            f"on {s['peak_same_token']:.0%} of them.")
    return {**s, "facts": m["facts"], "model": model, "text": text}


__all__ = ["compare", "summarize", "shipped", "agreement_note"]
