"""Hyperparameters for a model without a file of its own, by the rule the shipped ones were chosen with
(assets/hparams/README.md): the layers from the model's own causal traces, everything else carried over from a
template model's validated file, rescaled where the README says a value scales with the model.

    run = average_indirect_effect(lm, 20, samples=3)   # or an earlier `aie --json` run, or a shipped one
    derived = derive(lm, run)                           # {"peak": ..., "methods": {name: {"hparams": ...}}}

The rule (ROME Sec. 2.2 and Fig. 2; MEMIT Sec. 4.1): the MLP's average indirect effect at the last subject token
peaks at layer l*. Each method declares where its layers go (`Method.placement`): ROME edits l* ("peak"); MEMIT,
PMET and AlphaEdit as many layers as the template's file, centred on l* ("window", shifted to stay inside the
model); UltraEdit the template's layers centred at the same relative depth ("depth": it edits late layers, not the
recall site). MEMIT's and PMET's lambda (`mom2_update_weight`) scales with d_ff: a key has k^T C^-1 k ~ d_ff, so the
share of the residual one layer writes, ~ k^T C^-1 k / lambda, stays the same (README: Gemma -> SmolLM2).

Applied to the shipped AIE run of one real model with the other as template, the rule gives the layers chosen by hand
and validated for it (tests/test_derive.py). Derived values are a starting point, not a validated choice: their
`source` says so; choose on counterfact-val (`python -m editkit sweep --set counterfact-val`) before reporting.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..core.errors import EditkitError
from ..editing.defaults import shipped_file
from ..editing.hparams import from_dict
from ..editing.methods import get, names
from ..model.shipped import SHIPPED
from ..tracing.aie import AIE

# The template per adapter family: Gemma's residual stream carries massive activations (norm ~5,000 at layer 6),
# for which its files were tuned (MEMIT's v_lr 5); every other family starts from SmolLM2's (upstream-like) values.
TEMPLATES = {"gemma": "gemma-3-270m", "gemma1": "gemma-3-270m"}
DEFAULT_TEMPLATE = "smollm2-135m"
PLACEMENTS = ("peak", "window", "depth")


@dataclass(frozen=True)
class Peak:
    """Where the MLP's average indirect effect at the last subject token peaks, with its 95% band."""

    layer: int
    effect: float
    low: float
    high: float
    n_facts: int
    curve: tuple[float, ...]


def peak(run: AIE) -> Peak:
    """The peak of an AIE run (editkit.tracing.aie; `aie --json` writes it)."""
    s = run.kinds.get("mlp", {}).get("last subject")
    if s is None:
        raise EditkitError("the AIE run has no MLP effect at the last subject token")
    mean = [float(v) for v in s.mean]
    layer = max(range(len(mean)), key=mean.__getitem__)
    return Peak(layer, mean[layer], float(s.low[layer]), float(s.high[layer]), int(s.n), tuple(mean))


def place(placement: str, template_layers, template_depth: int, depth: int, peak_layer: int) -> list[int]:
    """The layers of a method on a model of `depth` layers, from its template file's layers (of `template_depth`)
    and the peak (module docstring)."""
    if placement not in PLACEMENTS:
        raise EditkitError(f"placement must be one of {', '.join(PLACEMENTS)}, not {placement!r}")
    if placement == "peak":
        return [peak_layer]
    width = min(len(template_layers), depth)
    centre = peak_layer
    if placement == "depth":
        relative = sum(template_layers) / len(template_layers) / max(template_depth - 1, 1)
        centre = round(relative * (depth - 1))
    start = min(max(0, centre - (width - 1) // 2), depth - width)
    return list(range(start, start + width))


def template_for(lm, template: str | None = None) -> str:
    name = template or TEMPLATES.get(lm.adapter.family.name, DEFAULT_TEMPLATE)
    if name not in SHIPPED:
        raise EditkitError(f"the template must be a shipped model ({', '.join(SHIPPED)}), not {name!r}")
    return name


def derive(lm, run: AIE, methods=None, template: str | None = None) -> dict:
    """{"model", "peak", "template", "methods": {name: {"hparams": dict, "placement"}}} for `lm` from its AIE `run`
    (module docstring); every method's values are validated against its typed Hparams."""
    depth, d_ff = lm.adapter.n_layers, lm.adapter.d_ff
    if run.layers != depth:
        raise EditkitError(f"the AIE run is of a model with {run.layers} layers, {lm.name} has {depth}")
    at = peak(run)
    name = template_for(lm, template)
    t = SHIPPED[name]
    out = {}
    for method in methods or names():
        spec = get(method)
        path = shipped_file(spec.name, name)
        if not path.exists():
            raise EditkitError(f"{spec.name} has no file for the template {name} ({path})")
        data = json.loads(path.read_text())
        data["layers"] = place(spec.placement, data["layers"], t.layers, depth, at.layer)
        if data.get("mom2_update_weight"):
            data["mom2_update_weight"] = float(f"{data['mom2_update_weight'] * d_ff / t.d_ff:.2g}")
        data["source"] = (f"derived by `python -m editkit hparams` (not validated): {spec.placement} placement at "
                          f"the MLP's AIE peak, layer {at.layer} of {depth} over {at.n_facts} facts; the rest from "
                          f"{name}'s file, lambda scaled by d_ff {d_ff} / {t.d_ff}")
        from_dict(spec.hparams, data)  # the typed check: every value valid for the method
        out[spec.name] = {"hparams": data, "placement": spec.placement}
    return {"model": lm.name, "peak": asdict(at), "template": name, "methods": out}
