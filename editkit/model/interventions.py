"""Your own interventions at named sites, for every whole run of the model inside one block.

    with Intervention(lm) as iv:                                  # editkit.intervene(lm) in the notebook API
        iv.patch("mlp_out.5", clean_state, positions=4)           # h[:, 4] = clean_state
        iv.ablate("attn_out.3")                                   # h = 0 at every position
        iv.add("resid_post.6", direction, scale=4.0)              # h += 4 * direction (a steering vector)
        iv.apply("mlp_key.2", lambda h: h.clamp(max=1.0))         # any function h -> h'
        ...editkit.activations / predict / logit_lens of lm here see all of them...
    # on exit every hook is gone and the model runs as before

Sites are editkit's (sites.py: "resid_pre.l", "mlp_out.l", "attn_out.l", "embed", ...). A site's tensor h is
(prompts, tokens, width); `positions` (an int, a list, a range or a slice; None = every position) count the
prompt's tokens from its first (special tokens included; batches are padded on the right, so position p is the
same token of every prompt); values broadcast over the prompts and positions they are written to (a (width,)
vector, (positions, width), or (prompts, positions, width)).

Isolation: the hooks are editkit's own (hooks.py): they act only in forward passes run in this thread (this
context), so another session of a served app, or another thread, computing with the same model meanwhile runs
straight through them; nothing of the model is changed, and leaving the block (also by an exception) removes
every hook.

Where an intervention applies: every run of the whole prompt made in the block. Causal traces and edits run
the model in pieces (a key/value prefix computed once, blocks stepped one at a time) and read editkit's
caches, which hold the model's numbers without the interventions, so inside the block those are refused with a
message (check_whole, core/cache.refused) instead of mixing intervened and clean numbers. An intervention at
every position by a fixed vector (add or ablate with positions=None) acts the same on any part of a run, so it
is allowed in continued runs too (a generation's steps).
"""
from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..core.cache import refused
from ..core.errors import EditkitError
from .hooks import Hooks
from .sites import parse

if TYPE_CHECKING:
    from .lm import LM

Index = tuple[Any, ...]  # an index into a (prompts, tokens, width) tensor
Change = Callable[[torch.Tensor, Index], torch.Tensor]

_ACTIVE: contextvars.ContextVar[tuple[Intervention, ...]] = contextvars.ContextVar("editkit_interventions",
                                                                                 default=())
REFUSED = ("editkit's caches hold the model's numbers without your interventions, so traces, edits and "
           "evaluations are refused inside `intervene`; inside it, activations, predict and logit_lens see "
           "them")


@dataclass(frozen=True)
class Step:
    """One intervention: what it does at which site and positions (`describe()` says it in words)."""

    kind: str  # patch | ablate | add | apply
    site: str
    positions: Any = None  # None: every position
    shape: tuple[int, ...] | None = None  # the values' shape (patch, add)

    @property
    def positional(self) -> bool:
        """Whether it depends on where a position lies in the prompt (a continued run would misplace it)."""
        return self.positions is not None or self.kind in ("patch", "apply")

    def describe(self) -> str:
        where = "every position" if self.positions is None else f"positions {_show(self.positions)}"
        return f"{self.kind} at {self.site}, {where}" + (f", values {list(self.shape)}" if self.shape else "")


class Intervention:
    """A block whose whole runs of the model go through your functions at sites (module docstring)."""

    def __init__(self, lm: LM) -> None:
        self.lm = lm
        self.steps: list[Step] = []
        self._hooks: Hooks | None = None
        self._exits: list[Callable[[], object]] = []

    def __enter__(self) -> Intervention:
        if self._hooks is not None:
            raise EditkitError("this intervention block is already open; start another with intervene(lm)")
        self._hooks = Hooks(self.lm).__enter__()
        cache = refused(REFUSED)
        cache.__enter__()
        token = _ACTIVE.set(_ACTIVE.get() + (self,))
        self._exits = [lambda: _ACTIVE.reset(token), lambda: cache.__exit__(None, None, None)]
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            for undo in self._exits:
                undo()
        finally:
            if self._hooks is not None:
                self._hooks.__exit__(*exc)
            self._hooks, self._exits = None, []

    # --- what to do at a site -------------------------------------------------------------------------------
    def patch(self, site: str, values: Any, positions: Any = None) -> Intervention:
        """Overwrite the site's tensor at `positions` with `values` (activation patching)."""
        values = torch.as_tensor(values)
        return self._add(Step("patch", _name(site), positions, tuple(values.shape)),
                         lambda h, at: _write(h, at, values.to(h.device, h.dtype)))

    def ablate(self, site: str, positions: Any = None) -> Intervention:
        """Zero the site's tensor at `positions` (zero ablation; for a mean ablation, patch the mean of
        activations(...) over a set of prompts)."""
        return self._add(Step("ablate", _name(site), positions), lambda h, at: _write(h, at, 0.0))

    def add(self, site: str, vector: Any, positions: Any = None, scale: float = 1.0) -> Intervention:
        """Add `scale` x `vector` to the site's tensor at `positions` (a steering vector)."""
        vector = torch.as_tensor(vector)
        return self._add(Step("add", _name(site), positions, tuple(vector.shape)),
                         lambda h, at: _write(h, at, h[at] + scale * vector.to(h.device, h.dtype)))

    def apply(self, site: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> Intervention:
        """Replace the site's tensor h (prompts, tokens, width) by fn(h), a tensor of the same shape."""
        def run(h: torch.Tensor, at: Index) -> torch.Tensor:
            out = fn(h)
            if not isinstance(out, torch.Tensor) or out.shape != h.shape:
                raise EditkitError(f"your function at {site} returned {_shape_of(out)}; it must return a "
                                   f"tensor of the shape it was given, {list(h.shape)}")
            return out
        return self._add(Step("apply", _name(site), None), run)

    def describe(self) -> list[str]:
        """Each intervention in words, in the order they were added."""
        return [s.describe() for s in self.steps]

    def _add(self, step: Step, change: Change) -> Intervention:
        if self._hooks is None:
            raise EditkitError("add interventions inside the block: "
                               "`with editkit.intervene(lm) as iv: iv.patch(...)`")
        at = _index(step.positions)

        def hook(h: torch.Tensor) -> torch.Tensor:
            try:
                return change(h.clone(), at)
            except (RuntimeError, IndexError) as exc:
                raise EditkitError(f"{step.describe()}: does not fit the run's {list(h.shape)} tensor "
                                   f"({str(exc).splitlines()[0][:160]})") from None

        self._hooks.set(step.site, hook)
        self.steps.append(step)
        return self


def active() -> tuple[Intervention, ...]:
    """The intervention blocks open in this context (innermost last)."""
    return _ACTIVE.get()


def check_whole(what: str) -> None:
    """Refuse `what` (a run in pieces) while an intervention that depends on positions is open (module
    docstring)."""
    steps = [s for iv in _ACTIVE.get() for s in iv.steps if s.positional]
    if steps:
        raise EditkitError(f"{what} runs the model in pieces, where your intervention "
                           f"({steps[0].describe()}) would land on other tokens; interventions act on whole "
                           "runs (activations, predict, logit_lens)")


def _name(site: Any) -> str:
    return parse(site).name


def _index(positions: Any) -> Index:
    """The index of the positions in a (prompts, tokens, width) tensor."""
    if positions is None:
        return (slice(None), slice(None))
    if isinstance(positions, slice):
        return (slice(None), positions)
    if isinstance(positions, int) and not isinstance(positions, bool):
        return (slice(None), positions)
    try:
        listed = [int(p) for p in positions]
    except (TypeError, ValueError):
        raise EditkitError(f"positions must be an int, a list or range of ints, a slice or None, not "
                           f"{positions!r}") from None
    return (slice(None), listed)


def _write(h: torch.Tensor, at: Index, values: Any) -> torch.Tensor:
    h[at] = values
    return h


def _show(positions: Any) -> str:
    if isinstance(positions, range):
        return f"{positions.start}..{positions.stop - 1}"
    return str(positions if not isinstance(positions, (list, tuple)) else list(positions))


def _shape_of(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    return type(value).__name__


__all__ = ["Intervention", "Step", "active", "check_whole", "REFUSED"]
