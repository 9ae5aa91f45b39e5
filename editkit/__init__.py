"""editkit: locate facts in transformer language models (causal tracing, FFN memories) and edit them (ROME, MEMIT,
PMET, AlphaEdit, UltraEdit), with their side effects.

    import editkit
    lm = editkit.load("gemma-3-270m")
    tr = editkit.trace(lm, "The Space Needle is in downtown", "Space Needle")
    tr.figure()

The names below come from editkit/api.py and the result types of the packages that compute them. They are imported
on first use (PEP 562), so `import editkit.core.errors` or a Ray worker's import of one module stays light: nothing
here loads torch until a function or type is asked for.
"""
from __future__ import annotations

import importlib

from .core import threads as _threads  # noqa: F401 - first: OpenMP's spin count, before torch loads

# The API's functions (no name may be a submodule's: `import editkit.lens` sets editkit.lens to the module) and
# the result and settings types, by the module that defines them
_API = ("load", "model_folder", "set_progress", "models", "methods", "applied", "activations", "intervene",
        "predict", "logit_lens", "trace", "preview", "severing", "aie", "shipped_aie", "edit", "save_patch",
        "load_patch", "compare", "bleed", "ripple", "ripple_evaluation", "evaluate", "sweep", "layer_sweep",
        "lifelong", "ffn_memories", "similarity_curves")
_TYPES = {
    "TraceSpec": "editkit.tracing.spec", "TraceResult": "editkit.tracing.result",
    "Traces": "editkit.tracing.result",
    "Severing": "editkit.tracing.severing", "AIE": "editkit.tracing.aie",
    "Predictions": "editkit.lens", "LogitLens": "editkit.lens",
    "EditRequest": "editkit.editing.requests", "EditResult": "editkit.editing.result",
    "EditReport": "editkit.evaluation.report", "Comparison": "editkit.evaluation.compare",
    "BleedMap": "editkit.evaluation.bleed", "RippleResult": "editkit.evaluation.ripple",
    "RippleEvaluation": "editkit.evaluation.ripple_eval", "Evaluation": "editkit.evaluation.evaluate",
    "Sweep": "editkit.evaluation.sweep", "LayerSweep": "editkit.evaluation.layer_sweep",
    "Lifelong": "editkit.evaluation.lifelong", "LifelongRun": "editkit.evaluation.sequential",
    "EvalSpec": "editkit.evaluation.measure",
    "SequentialSpec": "editkit.evaluation.sequential",
    "MemoryView": "editkit.memories.inspect", "SimilarityResult": "editkit.similarity",
    "Activations": "editkit.model.activations", "Intervention": "editkit.model.interventions",
    "Batch": "editkit.core.results", "Patch": "editkit.api",
    "EditkitError": "editkit.core.errors",
}
_WHERE = {**{name: "editkit.api" for name in _API}, **_TYPES}

__all__ = [*_API, *_TYPES]


def __getattr__(name: str):
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("editkit")
        except PackageNotFoundError:  # a checkout on PYTHONPATH without an install
            return "unknown"
    if name not in _WHERE:
        raise AttributeError(f"module 'editkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # the next lookup does not come here again
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
