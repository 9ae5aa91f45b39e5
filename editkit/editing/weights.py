"""Weight edits as data: apply, revert exactly, stack, save and load.

An edit is a `WeightDelta`: parameter name -> delta tensor, in the parameter's own storage layout (so GPT-2's
Conv1D deltas are stored transposed, exactly like the parameter). Applying keeps the original tensors of every
touched parameter, so `revert` restores the weights bitwise (adding and subtracting a float delta would not).

    backup = apply_delta(lm.model, delta)   # W <- W + delta, returns {name: original W (clone)}
    restore(lm.model, backup)               # W <- original, bit for bit

Patches are saved as safetensors (never pickle) with a JSON manifest beside them.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import EditkitError

WeightDelta = dict  # str (parameter name) -> torch.Tensor


def _params(model) -> dict[str, torch.nn.Parameter]:
    return dict(model.named_parameters())


def apply_delta(model, delta: WeightDelta) -> dict[str, torch.Tensor]:
    """W += delta for each named parameter; returns clones of the originals for an exact restore."""
    params = _params(model)
    for name, d in delta.items():
        if name not in params:
            raise EditkitError(f"patch names parameter '{name}', which this model does not have")
        if tuple(d.shape) != tuple(params[name].shape):
            raise EditkitError(f"patch for '{name}' has shape {tuple(d.shape)}, the model {tuple(params[name].shape)}")
        if not torch.isfinite(d).all():
            raise EditkitError(f"patch for '{name}' contains NaN or infinite values")
    backup = {name: params[name].detach().clone() for name in delta}
    with torch.no_grad():
        for name, d in delta.items():
            params[name].add_(d.to(params[name].device, params[name].dtype))
    return backup


def restore(model, backup: dict[str, torch.Tensor]) -> None:
    """Copy the saved originals back (bitwise)."""
    params = _params(model)
    with torch.no_grad():
        for name, original in backup.items():
            params[name].copy_(original)


@contextmanager
def applied(model, delta: WeightDelta):
    """Run a block with `delta` applied; the weights are restored bitwise afterwards, also on errors."""
    backup = apply_delta(model, delta)
    try:
        yield
    finally:
        restore(model, backup)


@dataclass
class EditRecord:
    """One applied edit in a history: its delta and a JSON-serializable description."""

    delta: WeightDelta
    manifest: dict = field(default_factory=dict)


class EditHistory:
    """A stack of edits on one model; `undo` pops the last exactly, `reset` returns to the base weights."""

    def __init__(self, model):
        self.model = model
        self.records: list[EditRecord] = []
        self._backups: list[dict[str, torch.Tensor]] = []

    def push(self, delta: WeightDelta, manifest: dict | None = None) -> EditRecord:
        record = EditRecord(delta, manifest or {})
        self._backups.append(apply_delta(self.model, delta))
        self.records.append(record)
        return record

    def undo(self) -> EditRecord | None:
        if not self.records:
            return None
        restore(self.model, self._backups.pop())
        return self.records.pop()

    def reset(self) -> None:
        while self.records:
            self.undo()

    def __len__(self) -> int:
        return len(self.records)


def combined(deltas: list[WeightDelta]) -> WeightDelta:
    """The sum of several deltas (for applying a stack of edits in one go)."""
    out: WeightDelta = {}
    for delta in deltas:
        for name, d in delta.items():
            out[name] = out[name] + d if name in out else d.clone()
    return out


def save_patch(path: str | Path, delta: WeightDelta, manifest: dict) -> Path:
    """Write `path` (.safetensors) and `path`.json (the manifest: method, requests, model, hparams...)."""
    from safetensors.torch import save_file

    path = Path(path)
    if path.suffix != ".safetensors":
        path = path.with_suffix(".safetensors")
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in delta.items()}, str(path),
              metadata={"editkit": "weight-delta"})
    meta = {**manifest, "parameters": {k: list(v.shape) for k, v in delta.items()}}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1, ensure_ascii=False))
    return path


def load_patch(path: str | Path) -> tuple[WeightDelta, dict]:
    """Read a patch written by `save_patch`; a corrupt or mismatched file is a clear error."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if path.suffix != ".safetensors":
        path = path.with_suffix(".safetensors")
    manifest_path = path.with_suffix(".json")
    try:
        delta = {k: v.clone() for k, v in load_file(str(path)).items()}  # no mmap left behind
    except (OSError, SafetensorError, ValueError) as exc:
        raise EditkitError(f"cannot read patch {path}: {exc}") from None
    try:
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    except ValueError as exc:
        raise EditkitError(f"patch manifest {manifest_path} is not valid JSON: {exc}") from None
    expected = manifest.get("parameters")
    if expected and {k: list(v.shape) for k, v in delta.items()} != expected:
        raise EditkitError(f"patch {path} does not match its manifest")
    return delta, manifest
