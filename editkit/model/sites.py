"""Sites: one name for each place in the model that an algorithm reads or writes.

Like TransformerLens' hook names or pyvene's site names, a site is a kind plus a layer, written "mlp_out.5". Each
kind says which module carries it (through the adapter, so the name means the same on every family) and in which
direction its hook looks (the module's output, or the first input of the module's forward):

    kind        module             hook     what it is (Meng et al. 2022; Geva et al. 2021)
    embed       embedding          output   token embeddings as they enter the residual (Gemma: scaled)
    resid_pre   block l            input    residual stream entering block l, h_{l-1}
    resid_mid   MLP norm l         input    the residual the MLP reads (h_{l-1} + a_l; parallel blocks: h_{l-1})
    resid_post  block l            output   residual stream leaving block l, h_l (causal tracing's "hidden")
    attn_out    attention l        output   attention output a_l, before any post-norm (tracing's "attn")
    mlp_out     MLP l              output   MLP output m_l, before any post-norm (tracing's "mlp")
    attn_write  post-attn norm l   output   what attention adds to the residual (= attn_out without post-norm)
    mlp_write   post-MLP norm l    output   what the MLP adds to the residual (= mlp_out without post-norm)
    mlp_key     down-projection l  input    FFN keys / memory coefficients m_i (d_ff wide; ROME's k)
    attn_z      W_O l              input    the heads' concatenated outputs (W_O's input; PMET's MHSA keys)

    site("mlp_out", 5).module(adapter)   # the module to hook
    parse("mlp_out.5")                   # Site(kind="mlp_out", layer=5)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import nn

from ..core.errors import EditkitError

if TYPE_CHECKING:
    from .adapters import Adapter

# kind -> (adapter part, hook direction, per layer)
KINDS: dict[str, tuple[str, str, bool]] = {
    "embed": ("embed", "output", False),
    "resid_pre": ("block", "input", True),
    "resid_mid": ("ln_mlp", "input", True),
    "resid_post": ("block", "output", True),
    "attn_out": ("attn", "output", True),
    "mlp_out": ("mlp", "output", True),
    "attn_write": ("post_attn_norm", "output", True),
    "mlp_write": ("post_mlp_norm", "output", True),
    "mlp_key": ("down_proj", "input", True),
    "attn_z": ("o_proj", "input", True),
}
# causal tracing's names for the three restored kinds (ROME's "hidden", "mlp", "attn")
TRACE_KINDS = {"hidden": "resid_post", "mlp": "mlp_out", "attn": "attn_out"}


@dataclass(frozen=True)
class Site:
    kind: str
    layer: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise EditkitError(f"unknown site kind {self.kind!r}; one of {', '.join(KINDS)}")
        if KINDS[self.kind][2] != (self.layer is not None):
            raise EditkitError(f"site {self.kind!r} {'needs' if KINDS[self.kind][2] else 'takes no'} layer")

    @property
    def name(self) -> str:
        return self.kind if self.layer is None else f"{self.kind}.{self.layer}"

    @property
    def direction(self) -> str:
        """'output' (the module's output) or 'input' (the first input of its forward)."""
        return KINDS[self.kind][1]

    def module(self, adapter: Adapter) -> nn.Module:
        """The module whose output (or input) this site is, on `adapter`'s model."""
        part = KINDS[self.kind][0]
        if self.kind in ("attn_write", "mlp_write"):  # no post-norm: the module's own output is what is added
            norm: nn.Module | None = getattr(adapter, part)(self.layer)
            if norm is not None:
                return norm
            written: nn.Module = getattr(adapter, self.kind.split("_")[0])(self.layer)
            return written
        if self.layer is not None and not 0 <= self.layer < adapter.n_layers:
            raise EditkitError(f"layer {self.layer} out of range: the model has layers 0..{adapter.n_layers - 1}")
        if part == "embed":
            return adapter.embed
        if part == "ln_mlp":
            if adapter.family.ln_mlp is None:
                raise EditkitError(f"{adapter.family.name} declares no norm before its MLP")
            return adapter.module(adapter.family.ln_mlp, self.layer)
        module: nn.Module = getattr(adapter, part)(self.layer)
        return module

    def __str__(self) -> str:
        return self.name


def site(kind: str, layer: int | None = None) -> Site:
    return Site(TRACE_KINDS.get(kind, kind), layer)


def layers(kind: str, n_layers: int) -> list[Site]:
    """The site `kind` at every layer."""
    return [Site(kind, l) for l in range(n_layers)]


def parse(name: "str | Site") -> Site:
    """'mlp_out.5' -> Site('mlp_out', 5); a Site is returned as it is."""
    if isinstance(name, Site):
        return name
    kind, _, layer = str(name).partition(".")
    try:
        number = int(layer) if layer else None
    except ValueError:
        raise EditkitError(f"site {name!r} should look like 'mlp_out.5'") from None
    return Site(kind, number)  # an unknown kind or a missing layer: Site says which
