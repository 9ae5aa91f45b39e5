"""Several methods on the same request(s) and the same base weights: what the Edit & compare page shows.

    out, deltas = compare_methods(lm, ["rome", "memit"], records, hparams={"rome": {...}})

`out` is JSON: the requests, the pre-edit measurement of each record (probabilities per prompt, generations), and
per method its label, time, diagnostics (weight-change norms, loss curves, how far the targets were reached),
metrics per record and post-edit measurements. `deltas` maps each method to its weight change (to trace or save
the edited model later). Every method is measured by `edit_and_measure`, exactly as the batch evaluation does.
"""
from __future__ import annotations

from ..core.errors import EditkitError
from ..core.progress import silent
from ..editing.methods import get
from .datasets import as_record
from .measure import EvalSpec, edit_and_measure, measure, probabilities


def compare_methods(lm, methods: list[str], records, hparams: dict | None = None, n_gen: int = 1,
                    gen_tokens: int = 30, progress=None) -> tuple[dict, dict]:
    """Each method edits `records` from the same weights (`hparams` = {method: overrides}) and is measured with
    `n_gen` generations of `gen_tokens` tokens per record; returns (out, deltas) as the module docstring says."""
    records = [as_record(r) for r in records]
    if not records:
        raise EditkitError("no request to edit")
    if not methods:
        raise EditkitError("pick at least one method")
    specs = [get(m) for m in methods]
    generation = EvalSpec(n_gen=n_gen, gen_tokens=gen_tokens)
    say = progress or silent
    say(0.0, "measuring the base model")
    pre = [measure(lm, r, n_gen, gen_tokens) for r in records]
    out = {"requests": [r.request.to_dict() for r in records],
           "pre": [{"probabilities": probabilities(p), "generations": p["generations"]} for p in pre],
           "methods": {}}
    deltas = {}
    for i, spec in enumerate(specs):
        def step(f, msg, i=i, spec=spec):
            say(min((i + 0.8 * f) / len(specs), 1.0), f"{spec.label}: {msg}")

        keep: dict = {}
        rows = edit_and_measure(lm, spec.name, records, (hparams or {}).get(spec.name), generation, pre=pre,
                                keep=keep, progress=step)
        result = keep["result"]
        out["methods"][spec.name] = {
            "label": spec.label, "color": spec.color, "seconds": result.seconds, "info": result.to_dict()["info"],
            "metrics": [r["metrics"] for r in rows],
            "post": [{"probabilities": probabilities(r["post"]), "generations": r["post"]["generations"]}
                     for r in rows]}
        deltas[spec.name] = result.delta
    say(1.0, "done")
    return out, deltas
