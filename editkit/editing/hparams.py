"""Typed hyperparameters: one frozen dataclass per method (its per-model defaults: editing/defaults.py).

    hp = defaults.load_hparams("memit", lm, {"v_num_grad_steps": 5})   # MemitHparams, validated
    hp.layers, hp.v_lr, hp.to_dict()
    hp.replace(kl_factor=0.1)                                  # a validated copy

`BaseHparams` is what every method's hyperparameters share (the edited layers; validation, to_dict, replace).
The locate-then-edit methods optimize target vectors the same way (ROME Eq. 4, MEMIT Eq. 16, targets.py), so
`Hparams` adds those fields; each method's dataclass (in its own file, editing/methods/) adds its own. A JSON
file or override with a key the method does not know is an error naming the key; numbers are checked for type,
finiteness and range.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import ClassVar

from ..core.errors import EditkitError


def _positive(v):
    return v > 0


def _non_negative(v):
    return v >= 0


def _unit(v):
    return 0 <= v <= 1


@dataclass(frozen=True)
class BaseHparams:
    """What every method's hyperparameters share: the edited layers, and validation on construction (types,
    finiteness, the class's CHECKS, then its own `check`), `to_dict` and `replace`."""

    layers: tuple[int, ...]  # edited layers (ROME: one; MEMIT/PMET/AlphaEdit: the critical window, increasing)

    CHECKS: ClassVar[dict] = {}  # field -> range check; ints are coerced
    # fields added after results were recorded -> the value that means the behaviour before them (`recorded`)
    NEUTRAL: ClassVar[dict] = {}
    # fields that act after any target optimisation (editing/memo.py may reuse targets optimized with others)
    SOLVE_ONLY: ClassVar[frozenset] = frozenset()

    def __post_init__(self):
        _validate(self)
        self.check()

    def check(self) -> None:
        """A method's own checks beyond types and ranges (none here)."""

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["layers"] = list(self.layers)
        return d

    def recorded(self) -> dict:
        """`to_dict` less the NEUTRAL fields at their neutral value and the `source` note: the settings a results
        file is named and headed by, so files recorded before such a field existed, or before the note was
        reworded, stay valid for the same behaviour."""
        neutral = type(self).NEUTRAL
        return {k: v for k, v in self.to_dict().items()
                if k != "source" and not (k in neutral and v == neutral[k])}

    def replace(self, **changes) -> "BaseHparams":
        return from_dict(type(self), {**self.to_dict(), **changes})


@dataclass(frozen=True)
class Hparams(BaseHparams):
    """What every locate-then-edit method shares: the edited layers and the target optimisation."""

    v_num_grad_steps: int = 20  # Adam steps for the target vector(s)
    v_lr: float = 0.5  # Adam learning rate
    v_weight_decay: float = 0.5  # weight of ||delta|| / ||init||^2 in the loss
    kl_factor: float = 0.0625  # weight of KL(P_orig || P_delta) on "{subject} is a"
    clamp_norm_factor: float = 4.0  # ||delta|| <= clamp_norm_factor * ||init|| after every step
    nll_loss_factor: float = 1.0  # weight of the NLL of the new target
    v_stop_loss: float = 5e-2  # early stop once the loss is below this
    # Stabilisers of the target optimisation (ENCORE, Gupta et al. 2025; targets.py), all off here (a model's file
    # may turn one on: Gemma 3 270M's locate-then-edit files set v_stop_top1 2, docs/results/speed.md):
    v_stop_top1: int = 0  # > 0: stop at the n-th step at which the new target is the most probable token at every
    # target position of every template (ENCORE's most-probable early stopping; its prob_cutoff -n)
    v_stop_prob: float = 0.0  # > 0: stop once the mean over templates of P(target_new) passes this (ENCORE's
    # prob_cutoff > 0)
    v_stop_stall: float = 0.0  # > 0: stop once one step lowers the loss by less than this share of it
    v_max_norm: float = 0.0  # > 0: ||v* - v|| = ||delta|| <= v_max_norm (model units) after every step, beside
    # the relative clamp (editkit's shift bound; ENCORE's own norm constraint is on the update: MEMIT's
    # update_norm_lambda)
    context_templates: int = 5  # generated prefixes (ROME Sec. 3.1), plus the bare prompt
    context_length: int = 10  # tokens per generated prefix
    mom2_n_tokens: int = 20000  # WikiText tokens for the second-moment statistics C = E[k k^T] (more than the
    # validation split has = all of it)
    mom2_shrinkage: float = 0.0  # alpha: C is estimated as (1 - alpha) C + alpha diag(C) (stats.estimate)
    mom2_entity_weight: float = 0.0  # beta: C mixes in (beta) the keys of named entities in the text (stats.py)
    nas_anchor: float = 0.0  # > 0: norm-anchor scaling, every value vector v* rescaled to this norm (anchor.py)
    nas_skip_factor: float = 0.0  # > 0: with NAS, an edit whose ||v*|| exceeds this x nas_anchor is skipped
    report_condition: bool = False  # report cond(W + dW) of every edited matrix in EditResult.norms (a view)
    source: str = ""  # where these values come from (provenance, shown to users)

    # field -> check (positive / non-negative); ints are coerced
    CHECKS = {"v_num_grad_steps": _positive, "v_lr": _positive, "clamp_norm_factor": _positive,
              "mom2_n_tokens": _positive, "context_length": _positive, "v_weight_decay": _non_negative,
              "kl_factor": _non_negative, "nll_loss_factor": _non_negative, "context_templates": _non_negative,
              "v_stop_loss": _non_negative, "mom2_shrinkage": _unit, "v_stop_top1": _non_negative,
              "v_stop_prob": _unit, "v_stop_stall": _unit, "v_max_norm": _non_negative,
              "nas_anchor": _non_negative, "nas_skip_factor": _non_negative,
              "mom2_entity_weight": _unit}
    # fields that act after the target optimisation (in the solve or on its result), never inside it: target
    # vectors optimized with other values of these can be reused (editing/memo.py); a method adds its own
    SOLVE_ONLY = frozenset({"layers", "mom2_n_tokens", "mom2_shrinkage", "mom2_entity_weight", "source",
                            "report_condition", "nas_anchor", "nas_skip_factor"})

    def check(self) -> None:
        if self.v_num_grad_steps > 1000:
            raise EditkitError("v_num_grad_steps above 1000 is not allowed")


def _validate(hp: BaseHparams) -> None:
    layers = hp.layers
    if not isinstance(layers, tuple) or not layers or not all(
            isinstance(l, int) and not isinstance(l, bool) for l in layers):
        raise EditkitError(f"hyperparameter 'layers' must be a non-empty list of integers, not {list(layers)!r}")
    if list(layers) != sorted(set(layers)):
        raise EditkitError("layers must be increasing and distinct")
    for f in fields(hp):
        v = getattr(hp, f.name)
        check = hp.CHECKS.get(f.name)
        if f.type in ("int", "float") or check:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise EditkitError(f"hyperparameter '{f.name}' must be a finite number, not {v!r}")
            if f.type == "int" and not isinstance(v, int):
                raise EditkitError(f"hyperparameter '{f.name}' must be a whole number, not {v!r}")
            if check and not check(v):
                raise EditkitError(f"hyperparameter '{f.name}' out of range: {v}")
        elif f.type == "bool" and not isinstance(v, bool):
            raise EditkitError(f"hyperparameter '{f.name}' must be true or false, not {v!r}")
        elif f.type == "str" and not isinstance(v, str):
            raise EditkitError(f"hyperparameter '{f.name}' must be a string, not {v!r}")


def from_dict(cls: type, data: dict) -> BaseHparams:
    """A validated `cls` from a dict; unknown keys and missing required ones are clear errors."""
    if not isinstance(data, dict):
        raise EditkitError(f"hyperparameters must be a JSON object, not {type(data).__name__}")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise EditkitError(f"unknown hyperparameter{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                           f"for {cls.__name__}; known: {', '.join(sorted(known))}")
    values = dict(data)
    if "layers" not in values:
        raise EditkitError("hyperparameter 'layers' is missing")
    if isinstance(values["layers"], list):
        values["layers"] = tuple(values["layers"])
    for name, f in known.items():  # whole numbers given as floats (JSON 20000.0) become ints
        v = values.get(name)
        if f.type == "int" and isinstance(v, float) and math.isfinite(v) and v == int(v):
            values[name] = int(v)
    return cls(**values)
