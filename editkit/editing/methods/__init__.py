"""The method registry: every editing method is one file in this folder plus its hyperparameter files.

The contract. A method file defines its typed hyperparameters (a frozen dataclass extending editing.hparams.Hparams)
and

    apply(lm, requests, hp, progress=None, reference=False, solves=False) -> EditResult

which computes the edit at the weights this context sees and never changes the model: the delta, per request the
target optimisation's losses (RequestReport), per edited parameter the norms, per layer what a multi-layer edit
wrote (LayerReport), and with `solves` the inputs of each update's equation (editing/result.py). `reference` runs
the target optimisation on the plain full model (a benchmark switch). A method that carries state from one batch of
a sequence to the next, as AlphaEdit its earlier keys, sets `stateful=True` and also takes `state=`
(editing/sequence.py). It registers itself with what it needs and what it can predict:

    METHOD = register(Method(name="rome", label="ROME", apply=apply_rome, hparams=RomeHparams,
                             first_use=first_use, predict_share=predict_share,
                             spreading="one layer, rank one", about="..."))

- `first_use(hp) -> FirstUse`: the per-model caches an edit with `hp` reads (key statistics by module and token
  positions at hp.layers, the context templates), computed with progress before the first edit
  (run.prepare_first_use). Default: nothing.
- `predict_share(lm, result) -> share.SharePrediction`: how the update acts on other keys, drawn by the bleed map
  (editing/share.py). Default: None, no prediction.
- `placement`: how `python -m editkit hparams` places its layers on a model without a file of its own
  ("peak", "window" or "depth"; evaluation/derive.py).
- `targets(hp) -> (sites, layer, adaptive)`: how it optimizes its target vectors (editing/targets.py), so that a
  layer sweep can optimize every layer's targets in one batch (targets.optimize_layers). Default: None (no target
  vectors, or not declared: each layer's edit optimizes its own).

assets/hparams/<name>/<model>.json holds its defaults per model. The CLI (`edit`, `evaluate`, `bench edit`), the
evaluation, the bleed map, the layer sweep, the hyperparameter loader and the Edit & compare page all read the
registry, so a new file here is a new method everywhere. Files in this folder are imported on first use; a method
defined elsewhere (a plugin, a test) calls `register` itself.
"""
from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ...core.errors import EditkitError
from ...core.paths import HPARAMS
from ...core.progress import Progress

if TYPE_CHECKING:
    from ...model.lm import LM
    from ..requests import EditRequest
    from ..result import EditResult
    from ..share import SharePrediction


@dataclass(frozen=True)
class FirstUse:
    """What an edit computes once per model and caches: the second-moment statistics of each module's inputs
    ("down_proj", "o_proj") over the given token positions ("all", "entities"), at hp.layers over
    hp.mom2_n_tokens tokens (editing/stats.py), and the context templates (editing/context.py)."""

    statistics: dict[str, tuple[str, ...]] = field(default_factory=dict)  # module -> positions
    templates: bool = False  # hp.context_templates prefixes of hp.context_length tokens


class Apply(Protocol):
    """A method's edit (the contract above). `hp` is the method's own Hparams subclass (Method.hparams); a
    stateful method's apply also takes `state=` (a SequenceState) and puts the next one in the result."""

    def __call__(self, lm: LM, requests: Sequence[EditRequest], hp: Any, progress: Progress | None = None,
                 reference: bool = False, solves: bool = False) -> EditResult: ...


# how it optimizes its target vectors: (sites, layer, adaptive) for targets.optimize_layers
TargetSpec = tuple[tuple[str, ...], int, bool]


def nothing(hp: Any) -> FirstUse:
    """The first use of a method that reads no cached statistics or templates."""
    return FirstUse()


@dataclass(frozen=True)
class Method:
    name: str  # the id used on the command line and in files ("rome")
    label: str  # for people ("ROME")
    apply: Apply
    hparams: type  # its frozen Hparams dataclass
    spreading: str  # how the update is spread over layers, in words
    about: str = ""  # one sentence with the paper
    color: str = "#555555"  # its colour in charts
    batch: bool = True  # edits a batch of requests jointly (False: one after another, as ROME)
    stateful: bool = False  # apply takes `state=` (editing/sequence.SequenceState) and returns the next one
    order: int = 100  # position in lists (built-ins: 10, 20, ...)
    hparams_dir: Path | None = None  # its per-model JSON defaults (default: assets/hparams/<name>/)
    first_use: Callable[[Any], FirstUse] = nothing
    predict_share: Callable[[LM, EditResult], SharePrediction] | None = None  # None: no prediction
    # where its layers go on a new model (evaluation/derive.py), from the MLP's average indirect effect at the last
    # subject token: "peak" (the one layer where it peaks), "window" (as many layers as the template model's file,
    # centred on the peak), "depth" (the template's layers, centred at the same relative depth)
    placement: str = "window"
    targets: Callable[[Any], TargetSpec] | None = None  # (hp) -> its target optimisation
    # (result, i) -> why request i's edit may not win its rewrite, where the method knows better than the
    # result's generic diagnostics (result.likely_reason); "" or None: no opinion
    explain: Callable[[EditResult, int], str | None] | None = None

    @property
    def defaults_dir(self) -> Path:
        return self.hparams_dir or HPARAMS / self.name


_REGISTRY: dict[str, Method] = {}
_loaded = False


def register(method: Method) -> Method:
    """Add (or replace) a method; returns it."""
    _REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    """Remove a method `register` added (a plugin's or a test's own; the library never calls it)."""
    _REGISTRY.pop(name, None)


_LOAD_LOCK = threading.RLock()


def _load_builtins() -> None:
    """Import every method module once. Sessions of a served app ask at the same time: the others wait until the
    registry is complete (marking it loaded before the imports let a second caller see it empty)."""
    global _loaded
    if _loaded:
        return
    with _LOAD_LOCK:
        if _loaded:
            return
        for info in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{info.name}")
        _loaded = True


def all_methods() -> list[Method]:
    """Registered methods, in their `order`."""
    _load_builtins()
    return sorted(_REGISTRY.values(), key=lambda m: (m.order, m.name))


def names() -> list[str]:
    return [m.name for m in all_methods()]


def label(name: str) -> str:
    """A method's label as the registry has it now (a method registered after a page loaded has one); the name
    itself for what is not a method (the in-context reference)."""
    return next((m.label for m in all_methods() if m.name == name), name)


def builtin_names() -> list[str]:
    """The built-in methods' names, alphabetical, without importing them (torch): each is the file it lives in, so
    a command's --help lists them at once (tests/test_registry.py checks every file registers its own name)."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__))


def get(name: str) -> Method:
    _load_builtins()
    key = name.strip().lower() if isinstance(name, str) else None  # a dict or list here is a misplaced argument
    if key not in _REGISTRY:
        raise EditkitError(f"method must be one of {', '.join(names())}, not {name!r}")
    return _REGISTRY[key]
