"""The method registry: every editing method is one file in this folder plus its hyperparameter files.

A method file defines its typed hyperparameters (a frozen dataclass extending editing.hparams.Hparams), an
`apply(lm, requests, hp, progress=None, debug=None, reference=False) -> EditResult` and registers them (a method
that carries state from one batch of a sequence to the next, as AlphaEdit its earlier keys, sets `stateful=True`
and takes `state=`; editing/sequence.py):

    METHOD = register(Method(name="rome", label="ROME", apply=apply_rome, hparams=RomeHparams,
                             spreading="one layer, rank one", about="..."))

and assets/hparams/<name>/<model>.json holds its defaults per model. The CLI (`edit`, `evaluate`, `bench edit`), the
evaluation, the hyperparameter loader and the Edit & compare page all read the registry, so a new file here is a new
method everywhere. Files in this folder are imported on first use; a method defined elsewhere (a plugin, a test)
calls `register` itself.
"""
from __future__ import annotations

import importlib
import pkgutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...errors import EditkitError
from ...paths import HPARAMS


@dataclass(frozen=True)
class Method:
    name: str  # the id used on the command line and in files ("rome")
    label: str  # for people ("ROME")
    apply: Callable  # (lm, requests, hp, progress=None, debug=None, reference=False) -> EditResult
    hparams: type  # its frozen Hparams dataclass
    spreading: str  # how the update is spread over layers, in words
    about: str = ""  # one sentence with the paper
    color: str = "#555555"  # its colour in charts
    batch: bool = True  # edits a batch of requests jointly (False: one after another, as ROME)
    stateful: bool = False  # apply takes `state=` (editing/sequence.SequenceState) and returns the next one
    order: int = 100  # position in lists (built-ins: 10, 20, ...)
    hparams_dir: Path | None = None  # its per-model JSON defaults (default: assets/hparams/<name>/)

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


def get(name: str) -> Method:
    _load_builtins()
    key = (name or "").strip().lower() if isinstance(name, str) else name
    if key not in _REGISTRY:
        raise EditkitError(f"method must be one of {', '.join(names())}, not {name!r}")
    return _REGISTRY[key]
