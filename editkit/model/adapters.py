"""Architecture adapters: where each piece of a transformer lives, one table per family.

Like TransformerLens's hook points, every algorithm in editkit asks the adapter for "the MLP of layer 5" or
"the down-projection of layer 5" instead of spelling out a module path. Module paths are templates with `{}`
for the layer index, as in kmeng01/rome's hparams (`layer_module_tmp`, `mlp_module_tmp`, `rewrite_module_tmp`).

A Family (declared in model/families.py) is data: module path templates plus the conventions that differ
between architectures (parallel blocks, GPT-2's Conv1D storage, RMSNorm's `1 + w` scale in Gemma). Everything
architecture-specific that an algorithm needs is answered here, once:
- `weight(part, l)` is a linear map in math layout (d_out, d_in), so that output = W @ input whatever the storage
  (GPT-2's Conv1D stores the transpose); `weight_delta(part, l, dW)` turns a math-layout change back into the
  parameter's own layout, keyed by the parameter name (what weights.py applies);
- `norm_scale(module)` is an RMSNorm's effective scale s and its eps, read from the module, with the family's
  offset (Gemma multiplies by 1 + w, Llama by w);
- `body` is the model without its LM head (the one place that knows `base_model_prefix`).
The named places *inside* a block that algorithms read and write are sites (editkit/model/sites.py); running part of
the model is the runner's job (editkit/model/runner.py).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import torch
from torch import nn

from ..core.errors import EditkitError
from .families import FAMILIES, MODEL_TYPES, Family


def _get(model: Any, path: str) -> nn.Module:
    """The submodule at dotted `path`; "a|b" tries a, then b (names that changed across transformers)."""
    if "|" in path:
        for alternative in path.split("|"):
            try:
                return _get(model, alternative)
            except (EditkitError, AttributeError, IndexError):
                continue
        raise EditkitError(f"module '{path}' not found")
    module = model
    for part in path.split("."):
        module = getattr(module, part, None) if not part.isdigit() else module[int(part)]
        if module is None:
            raise EditkitError(f"module '{path}' not found")
    if not isinstance(module, nn.Module):
        raise EditkitError(f"'{path}' is not a module")
    return module


class Adapter:
    """Named access to the parts of one loaded model (see module docstring)."""

    def __init__(self, model: Any, family: Family) -> None:
        self.model = model  # a transformers model (its types are not followed: pyproject.toml)
        self.family = family
        self.config = model.config
        text_config = getattr(self.config, "text_config", None) or self.config
        self.n_layers = len(cast(nn.ModuleList, self.module(family.blocks)))
        self.d_model = int(getattr(text_config, "hidden_size", None) or text_config.n_embd)
        self.d_ff = self.down_weight(0).shape[1]
        self.vocab_size = int(cast(torch.Tensor, self.module(family.unembed).weight).shape[0])
        # Gemma 2 caps logits with tanh(x / c) * c; Gemma 3 has it off.
        self.final_softcap = getattr(text_config, "final_logit_softcapping", None)
        n_positions = getattr(text_config, "n_positions", None) or getattr(text_config, "max_position_embeddings", None)
        self.max_length = int(n_positions) if n_positions else 2048

    # --- module lookup -------------------------------------------------------------------------------------
    def module(self, template: str, layer: int | None = None) -> nn.Module:
        return _get(self.model, template.format(layer) if layer is not None else template)

    def name(self, part: str, layer: int | None = None) -> str:
        """Dotted module path of `part` ('embed', 'block', 'attn', 'mlp', 'down_proj', ...) at `layer`."""
        template = {"block": self.family.blocks + ".{}"}.get(part) or getattr(self.family, part)
        if template is None:
            raise EditkitError(f"{self.family.name} has no '{part}' module")
        return template.format(layer) if "{}" in template else template

    @property
    def embed(self) -> nn.Module:
        return self.module(self.family.embed)

    def block(self, layer: int) -> nn.Module:
        return cast(nn.ModuleList, self.module(self.family.blocks))[layer]

    def attn(self, layer: int) -> nn.Module:
        return self.module(self.family.attn, layer)

    def mlp(self, layer: int) -> nn.Module:
        return self.module(self.family.mlp, layer)

    def down_proj(self, layer: int) -> nn.Module:
        return self.module(self.family.down_proj, layer)

    def o_proj(self, layer: int) -> nn.Module:
        """The attention's output projection W_O: input = the heads' concatenated outputs (site attn_z), output =
        the attention output a_l (PMET's MHSA update edits it)."""
        if not self.family.o_proj:
            raise EditkitError(f"{self.family.name} has no attention output projection in its adapter")
        return self.module(self.family.o_proj, layer)

    def post_mlp_norm(self, layer: int) -> nn.Module | None:
        return self.module(self.family.post_mlp_norm, layer) if self.family.post_mlp_norm else None

    def post_attn_norm(self, layer: int) -> nn.Module | None:
        return self.module(self.family.post_attn_norm, layer) if self.family.post_attn_norm else None

    @property
    def final_norm(self) -> nn.Module:
        return self.module(self.family.final_norm)

    @property
    def unembed_module(self) -> nn.Module:
        return self.module(self.family.unembed)

    @property
    def body(self) -> nn.Module:
        """The transformer without its LM head (its last_hidden_state is already through the final norm)."""
        body: nn.Module = getattr(self.model, self.model.base_model_prefix)
        return body

    # --- weights -------------------------------------------------------------------------------------------
    LINEAR_PARTS = ("down_proj", "o_proj")  # the linear maps editing methods change

    def _linear(self, part: str, layer: int) -> nn.Module:
        if part not in self.LINEAR_PARTS:
            raise EditkitError(f"'{part}' is not an editable linear map (one of {', '.join(self.LINEAR_PARTS)})")
        linear: nn.Module = getattr(self, part)(layer)
        return linear

    def weight(self, part: str, layer: int) -> torch.Tensor:
        """W of a linear part in math layout (d_out, d_in): output = W @ input (+ bias). A view of the live
        parameter (GPT-2's Conv1D: its transpose)."""
        w = cast(torch.Tensor, self._linear(part, layer).weight)
        return w.T if self.family.conv1d else w

    def bias(self, part: str, layer: int) -> torch.Tensor | None:
        return getattr(self._linear(part, layer), "bias", None)

    def param_name(self, part: str, layer: int) -> str:
        """The parameter name of a linear part's weight, as in model.named_parameters()."""
        return self.name(part, layer) + ".weight"

    def weight_delta(self, part: str, layer: int, dW: torch.Tensor) -> dict[str, torch.Tensor]:
        """{parameter name: change in the parameter's own layout} for a math-layout change dW (d_out, d_in)."""
        W = self.weight(part, layer)
        if tuple(dW.shape) != tuple(W.shape):
            raise EditkitError(f"a change of {part} {layer} must be {tuple(W.shape)}, not {tuple(dW.shape)}")
        dW = dW.to(torch.promote_types(W.dtype, torch.float32))  # a half-precision weight's change: float32
        return {self.param_name(part, layer): dW.T.contiguous() if self.family.conv1d else dW.contiguous()}

    def down_weight(self, layer: int) -> torch.Tensor:
        """W_out as (d_model, d_ff): value = W_out @ key."""
        return self.weight("down_proj", layer)

    def down_bias(self, layer: int) -> torch.Tensor | None:
        return self.bias("down_proj", layer)

    def norm_scale(self, norm: nn.Module) -> tuple[torch.Tensor, float]:
        """(s, eps) of an RMSNorm y = s * x / sqrt(mean(x^2) + eps): s = the family's offset + weight and eps read
        from the module (a module without one is an error, never a guess)."""
        eps = getattr(norm, "eps", getattr(norm, "variance_epsilon", None))
        if eps is None:
            raise EditkitError(f"{type(norm).__name__} exposes no eps; declare it in editkit/model/adapters.py")
        return self.family.norm_offset + cast(torch.Tensor, norm.weight).detach(), float(eps)

    def describe(self) -> dict[str, Any]:
        n_params = sum(p.numel() for p in self.model.parameters())
        return {
            "family": self.family.name,
            "model_type": self.config.model_type,
            "layers": self.n_layers,
            "d_model": self.d_model,
            "d_ff": self.d_ff,
            "vocab": self.vocab_size,
            "parameters": n_params,
            "parallel_blocks": self.family.parallel,
            "device": str(next(self.model.parameters()).device),
            "dtype": str(next(self.model.parameters()).dtype).replace("torch.", ""),
        }


def adapter_for(model: Any) -> Adapter:
    """The adapter for `model`, or a clear error naming what is missing."""
    model_type = getattr(model.config, "model_type", None)
    key = MODEL_TYPES.get(str(model_type))
    if key is None:
        raise EditkitError(
            f"unsupported architecture '{model_type}': editkit has adapters for "
            f"{', '.join(sorted(MODEL_TYPES))}. Add a Family in editkit/model/families.py naming its embedding, "
            "blocks, attention, MLP, down-projection, final norm and unembedding."
        )
    family = FAMILIES[key]
    if key == "gpt_neox" and not getattr(model.config, "use_parallel_residual", True):
        family = replace(family, parallel=False)
    if model_type == "stablelm" and getattr(model.config, "use_parallel_residual", False):
        family = replace(family, parallel=True, ln_mlp=family.ln_attn)  # x + attn(ln1(x)) + mlp(ln1(x))
    missing = []
    for field in ("embed", "blocks", "final_norm", "unembed"):
        try:
            _get(model, getattr(family, field))
        except (EditkitError, AttributeError, IndexError, TypeError):
            missing.append(f"{field} ('{getattr(family, field)}')")
    if not missing:
        for field in ("attn", "mlp", "down_proj", "post_attn_norm", "post_mlp_norm", "ln_attn", "ln_mlp", "o_proj"):
            template = getattr(family, field)
            if template is None:
                continue
            try:
                _get(model, template.format(0))
            except (EditkitError, AttributeError, IndexError, TypeError):
                missing.append(f"{field} ('{template.format(0)}')")
    if missing:
        raise EditkitError(
            f"model type '{model_type}' looks like family '{family.name}' but lacks: {', '.join(missing)}"
        )
    return Adapter(model, family)
