"""Lifelong-editing results as tables and curves (the data behind figures/lifelong.py and the page).

A result is what evaluation/sequential.py returns for one method; `results` maps method names to results.
`SHIPPED` is the run reported in the manual (docs/results/lifelong.md: the embedded model, 500 CounterFact edits,
ROME one by one, the others in batches of 25), so the page can draw the four methods' curves without an hour of
computing; `SHIPPED_STABILISERS` is ROME's 120 edits with and without the stabilisers (a run's key is then
"method+variant", with its own label).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..core.errors import EditkitError
from ..core.paths import ASSETS
from .metrics import harmonic_mean

SHIPPED = ASSETS / "results" / "lifelong-gemma-3-270m.json"
# ROME one by one, 120 edits: the defaults and with each stabiliser ("rome+encore", "rome+nas";
# docs/results/lifelong.md)
SHIPPED_STABILISERS = ASSETS / "results" / "lifelong-rome-stabilisers-gemma-3-270m.json"

def styled(results: dict) -> dict:
    """The runs with each registered method's label and colour filled in (figures/lifelong.py draws a run in the
    colour its data names; a variant such as "rome+encore" keeps its own label and gets a colour of its own)."""
    from ..editing.methods import get

    out = {}
    for method, res in results.items():
        try:
            m = get(method)
            out[method] = {"label": m.label, "color": m.color, **res}
        except EditkitError:
            out[method] = res
    return out


def final_table(results: dict) -> list[dict]:
    """One row per method: the last checkpoint (every edit measured once the run is complete), rates x100,
    Score = harmonic mean of efficacy, generalization and specificity (PMET Table 1), fluency x100."""
    table = []
    for method, res in results.items():
        rows = res.get("rows", [])
        if not rows:
            continue
        last = res.get("partial_final") or rows[-1]  # a stopped run's full measurement, when it has one
        rates = [100 * last[k] if last.get(k) is not None else None
                 for k in ("efficacy", "generalization", "specificity")]
        seconds = res.get("edit_seconds", [])
        table.append({
            "method": method, "label": res.get("label", method), "edits": last["edit"], "batch": res.get("batch"),
            "complete": bool(res.get("complete")), "measured": last.get("measured"),
            "efficacy": rates[0], "generalization": rates[1], "specificity": rates[2],
            "score": harmonic_mean(rates) if all(r is not None for r in rates) else None,
            "kept": _x100(last.get("kept")), "locality": _x100(last.get("locality")),
            "retention": 100 * last["retention"] if last.get("retention") is not None else None,
            "fluency": 100 * last["fluency"] if _finite(last.get("fluency")) else None,
            "base_fluency": 100 * res["base"]["fluency"] if _finite(res.get("base", {}).get("fluency")) else None,
            "perplexity": last.get("perplexity"), "base_perplexity": res.get("base_perplexity"),
            "perplexity_ratio": last.get("perplexity_ratio"),
            "total_relative_norm": last.get("total_relative_norm"),
            "max_relative_norm": last.get("max_relative_norm"),
            "seconds_per_edit": (sum(seconds) / last["edit"]) if seconds and last["edit"] else None,
            "collapsed_at": res.get("collapsed_at")})
    return table


def _x100(x):
    return 100 * x if _finite(x) else None


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def load_results(path=SHIPPED) -> dict:
    """method -> result, from a file written by `evaluate --sequential --save` (or the shipped one)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EditkitError(f"cannot read lifelong results {path}: {exc}") from None
    results = data.get("sequential", data) if isinstance(data, dict) else None
    if not isinstance(results, dict) or not all(isinstance(r, dict) and "rows" in r for r in results.values()):
        raise EditkitError(f"{path} holds no lifelong results (expected the output of evaluate --sequential)")
    return results
