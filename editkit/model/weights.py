"""Weight edits as data: apply them to one computation, stack, save and load.

An edit is a `WeightDelta`: parameter name -> delta tensor, in the parameter's own storage layout (so GPT-2's
Conv1D deltas are stored transposed, exactly like the parameter).

    with applied(lm.model, delta):   # this thread's forward passes see W + delta; nobody else's do
        ...
    current(lm.model, name)          # the weight this context sees (W, or W + the active deltas)
    fingerprint(lm)                  # identifies the weights this context sees (base + active deltas)
    model_key(lm)                    # cache key of the model this context sees: lm.name, or lm.name+<deltas>
    with unedited(): ...             # a block on the base weights, whatever edits the context has active

`applied` never touches the shared parameters. It computes W_eff = W + delta once and registers, for this context
only (editkit/model/hooks.py), a hook on the edited module that recomputes its output with W_eff: y = x W_eff^T + b, the
same arithmetic as a model whose weight holds W_eff, so results equal an in-place edit bit for bit. Contexts nest
(MEMIT applies layer after layer inside a session's edits): the innermost W_eff of a parameter is the one used.
Several sessions can therefore run on one model at once, each seeing only its own edits (editkit/model/isolation.py).

`apply_delta` / `restore` / `EditHistory` change the parameters in place (for saving an edited model, or a
persistent local experiment); the library's own computations never use them.

Patches are saved as safetensors (never pickle) with a JSON manifest beside them.
"""
from __future__ import annotations

import contextvars
import hashlib
import json
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias

import torch
import torch.nn.functional as F

from ..core.errors import EditkitError
from ..core.settings import limits
from .hooks import Hooks

if TYPE_CHECKING:
    from .lm import LM

WeightDelta = dict[str, torch.Tensor]  # parameter name -> change, in the parameter's own layout
Model: TypeAlias = "torch.nn.Module | LM"  # a torch model, or an LM (its .model)
# (W + deltas in the weight's dtype, the owning context, the deltas' digest, W + deltas before rounding)
Entry = tuple[torch.Tensor, object, str, torch.Tensor]

# parameter name -> (effective weight, owner hook context id, delta digest, W + deltas before rounding to the
# weight's dtype): what this context's forwards use
_EFFECTIVE: contextvars.ContextVar[Mapping[str, Entry]] = contextvars.ContextVar("editkit_weights",
                                                                               default=MappingProxyType({}))


def wide(dtype: torch.dtype) -> torch.dtype:
    """The dtype edits are computed and summed in: float32 for a half-precision weight, else its own."""
    return torch.promote_types(dtype, torch.float32)


def _bytes(t: torch.Tensor) -> bytes:
    """A tensor's raw bytes (bfloat16 included, which numpy cannot hold)."""
    return t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()


def _module(model_or_lm: Model) -> torch.nn.Module:
    """The torch model of an LM (editkit.model.loading.LM) or the model itself."""
    module: torch.nn.Module = model_or_lm if isinstance(model_or_lm, torch.nn.Module) else model_or_lm.model
    return module


def _params(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    return dict(model.named_parameters())


def check_delta(model: Model, delta: WeightDelta) -> None:
    """EditkitError unless every entry names a weight matrix of this model, has its shape and finite values, and
    moves it by at most limits.patch_scale times its own norm (||dW||_F / ||W||_F; an edit moves a matrix by a
    small fraction of it, a crafted patch with huge values would turn the model's outputs into noise or inf)."""
    params = _check(_module(model), delta)
    lim = limits()
    for name, d in delta.items():
        if not name.endswith(".weight") or params[name].dim() != 2:
            raise EditkitError(f"patch names '{name}', which is not a weight matrix (only linear maps are edited)")
        ratio = float(d.double().norm() / params[name].double().norm().clamp_min(1e-30))
        if not ratio <= lim.patch_scale:
            raise EditkitError(f"patch for '{name}' moves it by {ratio:.3g} times its own norm (||dW|| / ||W||), "
                               f"over this server's limit of {lim.patch_scale} ({lim.cite('patch_scale')})")


def _check(model: torch.nn.Module, delta: WeightDelta) -> dict[str, torch.nn.Parameter]:
    params = _params(model)
    for name, d in delta.items():
        if name not in params:
            raise EditkitError(f"patch names parameter '{name}', which this model does not have")
        if tuple(d.shape) != tuple(params[name].shape):
            raise EditkitError(f"patch for '{name}' has shape {tuple(d.shape)}, the model {tuple(params[name].shape)}")
        if not torch.isfinite(d).all():
            raise EditkitError(f"patch for '{name}' contains NaN or infinite values")
    return params


def _linear_output(module: torch.nn.Module, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The module's output with `weight` in place of its own (nn.Linear, or GPT-2's Conv1D)."""
    if isinstance(module, torch.nn.Linear):
        return F.linear(x, weight, module.bias)
    if type(module).__name__ == "Conv1D":  # y = x @ W + b, W stored (in, out)
        size = x.size()[:-1] + (weight.shape[1],)
        bias: torch.Tensor = module.bias  # type: ignore[assignment]
        return torch.addmm(bias, x.view(-1, x.size(-1)), weight).view(size)
    raise EditkitError(f"edits of {type(module).__name__} weights are not supported (only linear maps)")


def delta_digest(delta: WeightDelta) -> str:
    h = hashlib.sha1()
    for name in sorted(delta):
        h.update(name.encode())
        h.update(_bytes(delta[name]))
    return h.hexdigest()[:16]


@contextmanager
def applied(model: Model, delta: WeightDelta) -> Iterator[None]:
    """Run a block with `delta` added to the weights, in this context only (see module docstring). The shared
    parameters are never changed; an exception inside the block leaves nothing behind."""
    module = _module(model)
    if not delta:
        yield
        return
    params = _check(module, delta)
    current_map = _EFFECTIVE.get()
    new_map: dict[str, Entry] = dict(current_map)
    owner = object()
    with Hooks() as hooks:
        for name, d in delta.items():
            module_name, _, attr = name.rpartition(".")
            if attr != "weight":
                raise EditkitError(f"only weight matrices can be edited, not '{name}'")
            # W + delta in at least float32, rounded once into the weight's dtype; a half-precision weight keeps its
            # exact sum beside it (entry[3]) for nested edits, so deltas never accumulate in half precision
            exact_base = current_map[name][3] if name in current_map else params[name].detach()
            exact = exact_base.to(wide(exact_base.dtype)).add(d.to(exact_base.device, wide(exact_base.dtype)))
            W = exact.to(params[name].dtype)  # float32 and wider: W is `exact`, as an in-place edit computes it
            before = current_map[name][2] if name in current_map else ""
            new_map[name] = (W, owner, delta_digest({name: d}) + before, exact)

            def hook(mod: torch.nn.Module, args: tuple[Any, ...], output: Any,
                     name: str = name) -> torch.Tensor | None:
                entry = _EFFECTIVE.get().get(name)
                if entry is None or entry[1] is not owner:
                    return None  # an inner context owns this parameter
                return _linear_output(mod, args[0], entry[0])

            hooks.add_hook(module.get_submodule(module_name), hook)
        token = _EFFECTIVE.set(new_map)
        try:
            yield
        finally:
            _EFFECTIVE.reset(token)


def current(model: Model, name: str) -> torch.Tensor:
    """The parameter `name` as this context sees it: W plus the active deltas (storage layout, no grad)."""
    entry = _EFFECTIVE.get().get(name)
    return entry[0] if entry is not None else _params(_module(model))[name].detach()


def effective_state(model: Model) -> dict[str, torch.Tensor]:
    """The model's state dict as this context computes with it: the base tensors, except each parameter an active
    edit changes, which is its W + delta exactly as `applied` formed it (what model/export.py writes out)."""
    state = _module(model).state_dict()
    for name, entry in _EFFECTIVE.get().items():
        state[name] = entry[0]
    return state


def effective_weight(lm: LM, part: str, layer: int) -> torch.Tensor:
    """The linear map `part` of `layer` in math layout (d_out, d_in), as this context sees it (base + deltas)."""
    W = current(lm, lm.adapter.param_name(part, layer))
    return W.T if lm.adapter.family.conv1d else W


def active_digest() -> str:
    """A digest of the deltas active in this context ("" when none)."""
    entries = _EFFECTIVE.get()
    return hashlib.sha1(json.dumps(sorted((n, e[2]) for n, e in entries.items())).encode()).hexdigest()[:16] \
        if entries else ""


def model_key(lm: LM) -> str:
    """The name under which results computed in this context are cached: `lm.name` on the base weights,
    `lm.name+<digest of the active deltas>` inside an edit. Every cache of a weight-dependent result (known facts,
    trigger indexes, analyses, average effects, similarity curves) is keyed by it, so a session computing with
    its edits never writes (or reads) the entry other sessions use for the base model."""
    active = active_digest()
    return f"{lm.name}+{active}" if active else lm.name


@contextmanager
def unedited() -> Iterator[None]:
    """Run a block on the base weights even inside `applied` contexts (its hooks find no entry and pass the
    base output through). For results defined on the base model and cached under its name: the second-moment
    statistics C and the context templates (ROME and MEMIT compute both once, from the unedited model)."""
    token = _EFFECTIVE.set(MappingProxyType({}))
    try:
        yield
    finally:
        _EFFECTIVE.reset(token)


_BASE_DIGESTS: dict[int, tuple[int, str]] = {}
_DIGEST_LOCK = threading.Lock()  # one thread hashes a model's weights; the others wait for its digest


def fingerprint(lm: Model) -> str:
    """Identifies the weights this context computes with: a digest of the base parameters (computed once per
    loaded model; recomputed if a parameter was changed in place) plus the active deltas."""
    model = _module(lm)
    params = list(model.named_parameters())
    version = sum(p._version for _, p in params)
    key = id(model)
    with _DIGEST_LOCK:
        cached = _BASE_DIGESTS.get(key)
        if cached is None or cached[0] != version:
            h = hashlib.sha1()
            for name, p in params:
                h.update(name.encode())
                h.update(_bytes(p))
            cached = _BASE_DIGESTS[key] = (version, h.hexdigest()[:16])
    active = active_digest()
    return cached[1] + (f"+{active}" if active else "")


def apply_delta(model: torch.nn.Module, delta: WeightDelta) -> dict[str, torch.Tensor]:
    """W += delta for each named parameter, in place (shared by every user of the model); returns clones of the
    originals for an exact restore."""
    params = _check(model, delta)
    backup = {name: params[name].detach().clone() for name in delta}
    with torch.no_grad():
        for name, d in delta.items():
            p = params[name]
            p.copy_(p.to(wide(p.dtype)) + d.to(p.device, wide(p.dtype)))  # summed in float32, rounded once
    return backup


def restore(model: torch.nn.Module, backup: dict[str, torch.Tensor]) -> None:
    """Copy the saved originals back (bitwise)."""
    params = _params(model)
    with torch.no_grad():
        for name, original in backup.items():
            params[name].copy_(original)


@dataclass
class EditRecord:
    """One applied edit in a history: its delta and a JSON-serializable description."""

    delta: WeightDelta
    manifest: dict[str, Any] = field(default_factory=dict)


class EditHistory:
    """A stack of edits on one model; `undo` pops the last exactly, `reset` returns to the base weights."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.records: list[EditRecord] = []
        self._backups: list[dict[str, torch.Tensor]] = []

    def push(self, delta: WeightDelta, manifest: dict[str, Any] | None = None) -> EditRecord:
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
            out[name] = out[name] + d if name in out else d.to(wide(d.dtype), copy=True)
    return out


def save_patch(path: str | Path, delta: WeightDelta, manifest: dict[str, Any]) -> Path:
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


def load_patch(path: str | Path) -> tuple[WeightDelta, dict[str, Any]]:
    """Read a patch written by `save_patch`; a corrupt or mismatched file is a clear error."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    if path.suffix != ".safetensors":
        path = path.with_suffix(".safetensors")
    manifest_path = path.with_suffix(".json")
    if not path.is_file():
        raise EditkitError(f"no patch at {path} (a patch is a .safetensors file, its .json manifest beside it)")
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


def patch_bytes(delta: WeightDelta, manifest: dict[str, Any]) -> bytes:
    """One self-contained patch file (for a download): safetensors whose metadata holds the JSON manifest."""
    from safetensors.torch import save

    meta = {**manifest, "parameters": {k: list(v.shape) for k, v in delta.items()}}
    return save({k: v.detach().contiguous().cpu() for k, v in delta.items()},
                metadata={"editkit": "weight-delta", "manifest": json.dumps(meta, ensure_ascii=False)})


def patch_from_bytes(data: bytes, name: str = "patch") -> tuple[WeightDelta, dict[str, Any]]:
    """Read a patch file's bytes (an upload): safetensors written by `patch_bytes` or `save_patch`. Anything else,
    truncated or corrupt gives a clear EditkitError; check the result against a model with `check_delta`."""
    from safetensors import SafetensorError, safe_open

    if not data:
        raise EditkitError(f"{name} is empty")
    with tempfile.NamedTemporaryFile(suffix=".safetensors") as tmp:
        tmp.write(data)
        tmp.flush()
        try:
            with safe_open(tmp.name, "pt") as f:
                meta = f.metadata() or {}
                delta = {k: f.get_tensor(k).clone() for k in f.keys()}
        except (OSError, SafetensorError, ValueError, RuntimeError) as exc:
            raise EditkitError(f"{name} is not a readable safetensors patch ({str(exc)[:200]})") from None
    if meta.get("editkit") != "weight-delta":
        raise EditkitError(f"{name} is a safetensors file but not an editkit weight patch")
    if not delta:
        raise EditkitError(f"{name} holds no weight changes")
    try:
        manifest = json.loads(meta.get("manifest") or "{}")
    except ValueError as exc:
        raise EditkitError(f"{name}: its manifest is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise EditkitError(f"{name}: its manifest is not a JSON object")
    expected = manifest.get("parameters")
    if expected and {k: list(v.shape) for k, v in delta.items()} != expected:
        raise EditkitError(f"{name} does not match its manifest")
    for k, v in delta.items():
        if not v.is_floating_point() or not torch.isfinite(v).all():
            raise EditkitError(f"{name}: the change of '{k}' is not finite floating-point numbers")
    return delta, manifest
