"""Read and overwrite module inputs/outputs during a forward pass; hooks are always removed afterwards.

    with Hooks(lm) as hooks:
        cache = hooks.capture(["mlp_out.3", "mlp_key.3"])             # sites (editkit/model/sites.py) ...
        hooks.set(site("resid_post", 5), lambda h: h * 0)            # overwrite a site's tensor
        hooks.patch(site("mlp_out", 2), positions=[4], values=v, rows=slice(1, None))
        hooks.capture({"x": some_module}, what="input")               # ... or plain modules
        lm.runner.forward(input_ids=ids)
    cache["mlp_out.3"]  # the tensor the MLP returned

A read (and overwrite) paired with one run is `runner.read(sites, edit=..., **inputs)`
(editkit/model/runner.py); a Hooks block of its own is for what spans several calls (the tracing engine's
block steps, weights.applied).

HF modules return either a tensor or a tuple whose first element is the hidden state (attention modules
return (output, weights)); editkit always works on that first tensor and packs the rest back unchanged.
Removal happens in __exit__, so an exception inside the block never leaves a hook behind.

Hooks belong to the context (thread) that registered them: a hook only acts in forward passes run inside its own
`with Hooks()` block, in the same thread or asyncio task. Another user's forward pass on the same model, in another
thread, runs straight through it. That is what lets several sessions share one model (editkit/model/isolation.py).
"""
from __future__ import annotations

import contextvars
import itertools
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from .sites import parse

_ACTIVE: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("editkit_hooks", default=frozenset())
_ids = itertools.count()


def first_tensor(output: Any) -> torch.Tensor:
    """The hidden-state tensor of a module output (tensor or tuple)."""
    first: torch.Tensor = output[0] if isinstance(output, (tuple, list)) else output
    return first


def _replace_first(output: Any, tensor: torch.Tensor) -> Any:
    if isinstance(output, tuple):
        return (tensor,) + tuple(output[1:])
    if isinstance(output, list):
        return [tensor] + list(output[1:])
    return tensor


def _first_input(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else next(iter(kwargs.values()))


def _with_first_input(args: tuple[Any, ...], kwargs: dict[str, Any],
                      x: torch.Tensor) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if args:
        return (x,) + tuple(args[1:]), kwargs
    key = next(iter(kwargs))
    return args, {**kwargs, key: x}


class Hooks:
    """A context that owns forward hooks, acts only in its own context, and removes every hook on exit."""

    def __init__(self, lm: Any = None) -> None:
        self.adapter = getattr(lm, "adapter", lm)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._id = next(_ids)
        self._token: contextvars.Token[frozenset[int]] | None = None

    def __enter__(self) -> Hooks:
        self._token = _ACTIVE.set(_ACTIVE.get() | {self._id})
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
        if self._token is not None:
            _ACTIVE.reset(self._token)
            self._token = None

    def remove(self) -> None:
        while self._handles:
            self._handles.pop().remove()

    def _mine(self) -> bool:
        return self._id in _ACTIVE.get()

    def _resolve(self, where: Any, what: str) -> tuple[nn.Module, str]:
        """(module, direction) of a Site, a site name or a module (with direction `what`)."""
        if isinstance(where, nn.Module):
            return where, what
        s = parse(where)
        if self.adapter is None:
            raise ValueError("Hooks(lm) is needed to hook sites by name")
        return s.module(self.adapter), s.direction

    # --- reading -------------------------------------------------------------------------------------------
    def capture(self, where: Any, what: str = "output", detach: bool = True,
                then: Callable[[dict[str, torch.Tensor]], None] | None = None) -> dict[str, torch.Tensor]:
        """Fill and return a dict name -> tensor. `where` is a list of sites (keyed by site name) or a dict
        name -> site or module (a module's output, or its first input with what="input"). `then(cache)` is called
        after each tensor is kept (the runner stops a run once it holds every one)."""
        if not isinstance(where, dict):
            where = {parse(s).name: s for s in where}
        cache: dict[str, torch.Tensor] = {}
        for name, place in where.items():
            module, direction = self._resolve(place, what)

            def keep(t: torch.Tensor, name: str = name) -> None:
                cache[name] = t.detach() if detach else t
                if then is not None:
                    then(cache)

            if direction == "output":
                self._add(module, lambda mod, args, output, keep=keep: keep(first_tensor(output)), "output")
            elif direction == "input":
                self._add(module, lambda mod, args, kwargs, keep=keep: keep(_first_input(args, kwargs)), "input")
            else:
                raise ValueError(f"what must be 'output' or 'input', not {direction!r}")
        return cache

    def block_args(self, blocks: dict[int, nn.Module]) -> dict[int, tuple[Any, ...]]:
        """Record how the model calls each block: key -> (positional args after the hidden state, kwargs)."""
        store: dict[int, tuple[Any, ...]] = {}
        for key, module in blocks.items():
            def hook(mod: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], key: int = key) -> None:
                store[key] = (tuple(args[1:]), dict(kwargs))
            self._add(module, hook, "input")
        return store

    # --- writing -------------------------------------------------------------------------------------------
    def set(self, where: Any, fn: Callable[[torch.Tensor], torch.Tensor], what: str = "output") -> None:
        """Replace the site's (or module's) tensor h by fn(h)."""
        module, direction = self._resolve(where, what)
        if direction == "output":
            self._add(module, lambda mod, args, output: _replace_first(output, fn(first_tensor(output))), "output")
        else:
            self._add(module, lambda mod, args, kwargs: _with_first_input(args, kwargs, fn(_first_input(args, kwargs))),
                      "input")

    def patch(self, where: Any, positions: Iterable[int] | int, values: torch.Tensor, rows: Any = slice(None),
              what: str = "output") -> None:
        """Overwrite tensor[rows, positions] with values (broadcast over rows)."""
        self.set(where, _patcher(positions, values, rows), what)

    def add_hook(self, module: nn.Module, hook: Callable[..., Any], direction: str = "output") -> None:
        """Register a raw torch-style hook, gated to this context: (module, args, output) -> new output or None
        for "output"; (module, args, kwargs) -> (args, kwargs) or None for "input"."""
        self._add(module, hook, direction)

    def _add(self, module: nn.Module, hook: Callable[..., Any], direction: str) -> None:
        """Register `hook` gated to this context. A gated hook that fires in another thread's forward pass (or,
        during registration, without its kwargs) does nothing."""
        if direction == "output":
            def gated(mod: nn.Module, args: tuple[Any, ...], *rest: Any) -> Any:
                return hook(mod, args, rest[-1]) if rest and self._mine() else None
            self._handles.append(module.register_forward_hook(gated))
        else:
            def gated_pre(mod: nn.Module, args: tuple[Any, ...], *rest: Any) -> Any:
                return hook(mod, args, rest[0]) if rest and self._mine() else None
            self._handles.append(module.register_forward_pre_hook(gated_pre, with_kwargs=True))


def _patcher(positions: Iterable[int] | int, values: torch.Tensor,
             rows: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    pos = [positions] if isinstance(positions, int) else list(positions)

    def fn(h: torch.Tensor) -> torch.Tensor:
        h = h.clone()
        h[rows, pos] = values.to(h.dtype)
        return h

    return fn
