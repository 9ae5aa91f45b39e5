"""What a method carries from one batch of a sequence of edits to the next.

Lifelong (sequential) editing applies batch after batch, each computed at the weights the earlier ones left
(evaluation/sequential.py). Most methods need nothing but those weights. AlphaEdit also needs the keys of every
earlier edit of the sequence: its update (Fang et al. 2025, Eq. 14)
    Delta = R K1^T P (K_p K_p^T P + K1 K1^T P + alpha I)^-1
keeps the earlier edits' keys K_p where they are, and upstream accumulates K_p K_p^T in a `cache_c` tensor that lives
across calls (jianghoucheng/AlphaEdit AlphaEdit_main.py; EasyEdit keeps it in a module global). Here that state is
an explicit value: a method that declares `stateful=True` (editing/methods) takes `state=` and returns the next state
in `EditResult.state`; the input is never changed, so a checkpoint of (accumulated deltas, state) is a resumable
point of the sequence. It is tensors plus JSON, saved as one safetensors file.

AlphaEdit stores the keys themselves, K_p (d_in, m) per layer, rather than their Gram matrix: smaller while the
sequence has fewer edits than the key width (500 edits on Gemma's d_ff = 2048: 4 MB a layer instead of 16 MB),
and K_p K_p^T is formed in float64 when needed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.errors import EditkitError


@dataclass(frozen=True)
class SequenceState:
    method: str  # the method whose state this is
    tensors: dict = field(default_factory=dict)  # name -> tensor (AlphaEdit: "keys.<layer>" (d_in, m))
    meta: dict = field(default_factory=dict)  # JSON: "edits" (requests so far), "batches"

    @property
    def edits(self) -> int:
        return int(self.meta.get("edits", 0))

    def keys(self, layer: int) -> torch.Tensor | None:
        return self.tensors.get(f"keys.{layer}")

    def with_keys(self, new: dict[int, torch.Tensor], n_requests: int) -> "SequenceState":
        """The next state: these keys (layer -> (d_in, n)) appended to the earlier ones."""
        tensors = dict(self.tensors)
        for layer, K in new.items():
            old = self.keys(layer)
            K = K.detach().float().cpu()
            tensors[f"keys.{layer}"] = K if old is None else torch.cat([old, K], 1)
        meta = {**self.meta, "edits": self.edits + n_requests, "batches": int(self.meta.get("batches", 0)) + 1}
        return SequenceState(self.method, tensors, meta)

    def check(self, method: str) -> None:
        if self.method != method:
            raise EditkitError(f"this sequence state belongs to {self.method}, not {method}")

    # --- serialization --------------------------------------------------------------------------------------
    def to_tensors(self, prefix: str = "state.") -> tuple[dict, dict]:
        """(tensors with `prefix`, JSON header) for a safetensors file shared with other content."""
        return ({prefix + k: v.contiguous().cpu() for k, v in self.tensors.items()},
                {"method": self.method, "meta": self.meta})

    @classmethod
    def from_tensors(cls, tensors: dict, header: dict, prefix: str = "state.") -> "SequenceState":
        own = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
        return cls(header["method"], own, dict(header.get("meta", {})))

    def save(self, path) -> Path:
        from safetensors.torch import save_file

        tensors, header = self.to_tensors()
        path = Path(path)
        save_file(tensors, str(path), metadata={"sequence_state": json.dumps(header)})
        return path

    @classmethod
    def load(cls, path) -> "SequenceState":
        from safetensors import safe_open

        try:
            with safe_open(str(path), "pt") as f:
                tensors = {k: f.get_tensor(k).clone() for k in f.keys()}
                header = json.loads(f.metadata()["sequence_state"])
        except Exception as exc:  # noqa: BLE001 - any unreadable file is the same error for the user
            raise EditkitError(f"cannot read a sequence state from {path}: {exc}") from None
        return cls.from_tensors(tensors, header)
