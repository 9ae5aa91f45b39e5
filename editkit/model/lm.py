"""A loaded model: the transformers model, its tokenizer and the architecture's adapter (model/adapters.py),
loaded at once (model/loading.py) or at its first use (`LM.deferred`: a notebook's `editkit.load` of a converted
model)."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable

import torch

from .adapters import Adapter

if TYPE_CHECKING:
    from .runner import Runner


@dataclass
class LM:
    """A loaded model with its tokenizer and architecture adapter."""

    name: str
    model: Any  # the transformers model, a torch.nn.Module (its types are not followed: pyproject.toml)
    tok: Any  # the transformers tokenizer (its types are not followed: pyproject.toml)
    adapter: Adapter

    @staticmethod
    def deferred(name: str, source: str, build: Callable[[], LM]) -> LM:
        """An LM named `name` whose model, tokenizer and adapter `build()` loads at their first use: a
        notebook's `editkit.load` of a converted model returns before transformers' model classes are
        imported, and a plain predict answers by the light forward (model/quick.py, on `source`, the name
        given) until something needs the model itself."""
        lm = object.__new__(LM)
        lm.__dict__.update(name=name, _source=source, _build=build, _lock=threading.Lock())
        return lm

    @property
    def pending(self) -> bool:
        """Whether this is a deferred LM whose model is not loaded yet."""
        return "_build" in self.__dict__

    def __getattr__(self, attr: str) -> Any:
        # reached only for attributes not set: a deferred LM's model, tok and adapter before their first use
        build = self.__dict__.get("_build")
        if build is None or attr not in ("model", "tok", "adapter"):
            raise AttributeError(f"'LM' object has no attribute {attr!r}")
        with self.__dict__["_lock"]:
            if "_build" in self.__dict__:
                full = build()
                self.__dict__.update(model=full.model, tok=full.tok, adapter=full.adapter)
                del self.__dict__["_build"]
        return self.__dict__[attr]

    @property
    def source(self) -> str:
        """The name the model was asked by (a deferred LM's; else its name)."""
        return str(self.__dict__.get("_source", self.name))

    def __repr__(self) -> str:
        return f"LM({self.name!r}{', loaded at its first use' if self.pending else ''})"

    @property
    def device(self) -> torch.device:
        device: torch.device = next(self.model.parameters()).device
        return device

    @cached_property
    def runner(self) -> Runner:
        """Partial runs of this model (editkit/model/runner.py)."""
        from .runner import Runner

        return Runner(self)

    @property
    def dtype(self) -> torch.dtype:
        dtype: torch.dtype = next(self.model.parameters()).dtype
        return dtype

    def describe(self) -> dict[str, Any]:
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        return {"name": self.name, **self.adapter.describe(), "weights_bytes": weights}
