"""Read and overwrite module inputs/outputs during a forward pass; hooks are always removed afterwards.

    with Hooks() as hooks:
        cache = hooks.capture({"mlp.3": adapter.mlp(3)})          # read outputs
        hooks.set_output(adapter.block(5), lambda h: h * 0)        # overwrite outputs
        hooks.patch_output(adapter.mlp(2), positions=[4], values=v, rows=slice(1, None))
        model(input_ids)
    cache["mlp.3"]  # the tensor the MLP returned

HF modules return either a tensor or a tuple whose first element is the hidden state (attention modules
return (output, weights)); editkit always works on that first tensor and packs the rest back unchanged.
Removal happens in __exit__, so an exception inside the block never leaves a hook behind.
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch
from torch import nn


def first_tensor(output):
    """The hidden-state tensor of a module output (tensor or tuple)."""
    return output[0] if isinstance(output, (tuple, list)) else output


def _replace_first(output, tensor):
    if isinstance(output, tuple):
        return (tensor,) + tuple(output[1:])
    if isinstance(output, list):
        return [tensor] + list(output[1:])
    return tensor


class Hooks:
    """A context that owns forward hooks and removes every one of them on exit."""

    def __init__(self):
        self._handles: list = []

    def __enter__(self) -> "Hooks":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def remove(self) -> None:
        while self._handles:
            self._handles.pop().remove()

    # --- reading -------------------------------------------------------------------------------------------
    def block_args(self, blocks: dict[int, nn.Module]) -> dict[int, tuple]:
        """Record how the model calls each block: key -> (positional args after the hidden state, kwargs), for
        running the blocks by hand later with the same rotary embeddings, masks and cache."""
        store: dict[int, tuple] = {}
        for key, module in blocks.items():
            def hook(mod, args, kwargs, key=key):
                store[key] = (tuple(args[1:]), dict(kwargs))
            self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
        return store

    def capture(self, modules: dict[str, nn.Module], what: str = "output", detach: bool = True) -> dict:
        """Fill and return a dict name -> tensor with each module's output (or first positional input)."""
        cache: dict[str, torch.Tensor] = {}

        for name, module in modules.items():
            if what == "output":
                def hook(mod, args, output, name=name):
                    t = first_tensor(output)
                    cache[name] = t.detach() if detach else t
            elif what == "input":
                def hook(mod, args, kwargs, name=name):
                    t = args[0] if args else next(iter(kwargs.values()))
                    cache[name] = t.detach() if detach else t
            else:
                raise ValueError(f"what must be 'output' or 'input', not {what!r}")
            self._add(module, hook, what)
        return cache

    # --- writing -------------------------------------------------------------------------------------------
    def set_output(self, module: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Replace the module's output tensor h by fn(h)."""

        def hook(mod, args, output):
            return _replace_first(output, fn(first_tensor(output)))

        self._add(module, hook, "output")

    def set_input(self, module: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Replace the module's first positional input x by fn(x)."""

        def hook(mod, args, kwargs):
            if args:
                return (fn(args[0]),) + tuple(args[1:]), kwargs
            key = next(iter(kwargs))
            return args, {**kwargs, key: fn(kwargs[key])}

        self._add(module, hook, "input")

    def patch_output(self, module, positions, values, rows=slice(None)) -> None:
        """Overwrite output[rows, positions] with values (broadcast over rows)."""
        self.set_output(module, _patcher(positions, values, rows))

    def patch_input(self, module, positions, values, rows=slice(None)) -> None:
        """Overwrite input[rows, positions] with values (broadcast over rows)."""
        self.set_input(module, _patcher(positions, values, rows))

    def _add(self, module: nn.Module, hook, what: str) -> None:
        if what == "output":
            handle = module.register_forward_hook(hook)
        else:
            handle = module.register_forward_pre_hook(hook, with_kwargs=True)
        self._handles.append(handle)


def _patcher(positions: Iterable[int] | int, values: torch.Tensor, rows):
    pos = [positions] if isinstance(positions, int) else list(positions)

    def fn(h: torch.Tensor) -> torch.Tensor:
        h = h.clone()
        h[rows, pos] = values.to(h.dtype)
        return h

    return fn


def cache_layers(cache) -> list:
    """The per-layer objects of an HF Cache (each holds that layer's keys and values)."""
    cache = getattr(cache, "self_attention_cache", cache)  # an encoder-decoder wrapper
    return list(getattr(cache, "layers", []))
