"""The outcome of one edit: the weight delta (not applied) and JSON-serializable diagnostics."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .requests import EditRequest


@dataclass
class EditResult:
    method: str
    requests: list[EditRequest]
    delta: dict[str, torch.Tensor]  # parameter name -> delta, in the parameter's layout
    info: dict = field(default_factory=dict)
    seconds: float = 0.0
    state: object = None  # a stateful method's next SequenceState (editing/sequence.py); None for the others

    def to_dict(self) -> dict:
        return {"method": self.method, "requests": [r.to_dict() for r in self.requests], "info": self.info,
                "seconds": round(self.seconds, 3), "parameters": {k: list(v.shape) for k, v in self.delta.items()}}


def norm_report(model, delta: dict[str, torch.Tensor]) -> dict:
    """||dW||_F, ||W||_F and their ratio per edited parameter."""
    params = dict(model.named_parameters())
    out = {}
    for name, d in delta.items():
        w = float(params[name].detach().norm())
        dn = float(d.norm())
        out[name] = {"delta_norm": dn, "weight_norm": w, "relative_norm": dn / w if w else float("inf")}
    return out
