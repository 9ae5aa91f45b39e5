"""One next-token prediction: the token, its id, its probability and its logit (model/text.py,
model/quick.py)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Prediction:
    token: str
    token_id: int
    prob: float
    logit: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
