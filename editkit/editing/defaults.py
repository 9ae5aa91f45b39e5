"""Per-model default hyperparameters: assets/hparams/<method>/<model>.json, found through the method registry and
validated against the method's typed Hparams (editing/hparams.py) and the model's layer count."""
from __future__ import annotations

import json

from ..errors import EditkitError
from .hparams import Hparams, from_dict
from .methods import get


def _file_key(model_name: str) -> str:
    name = model_name.lower().rstrip("/").split("/")[-1].split("@")[0]  # "gemma-3-270m@bfloat16": gemma's files
    if name.startswith("tiny-"):
        return "tiny"
    return name.replace("eleutherai_", "").removesuffix("-hf")  # meta-llama/Llama-2-7b-hf -> llama-2-7b


def load_hparams(method: str, lm_or_name, overrides: dict | None = None) -> Hparams:
    """The method's defaults for this model (assets/hparams/<method>/<model>.json) with `overrides`, validated
    against the method's dataclass and the model's layer count."""
    spec = get(method)
    name = getattr(lm_or_name, "name", lm_or_name)
    path = spec.defaults_dir / f"{_file_key(name)}.json"
    if not path.exists():
        have = sorted(p.stem for p in spec.defaults_dir.glob("*.json"))
        raise EditkitError(f"no {spec.name} hyperparameters for '{name}' (have: {', '.join(have) or 'none'}); pass "
                           "a file with --hparams, copying the closest one and choosing layers from the model's "
                           "causal traces")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise EditkitError(f"{path} is not valid JSON: {exc}") from None
    if overrides is not None and not isinstance(overrides, dict):
        raise EditkitError(f"hyperparameters must be a JSON object like {{\"v_lr\": 0.5}}, not "
                           f"{type(overrides).__name__}")
    hp = from_dict(spec.hparams, {**data, **(overrides or {})})
    n_layers = getattr(getattr(lm_or_name, "adapter", None), "n_layers", None)
    if n_layers is not None and any(not 0 <= l < n_layers for l in hp.layers):
        raise EditkitError(f"layers {list(hp.layers)} out of range: the model has layers 0..{n_layers - 1}")
    return hp


def load_hparams_file(path) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as exc:
        raise EditkitError(f"cannot read hyperparameters {path}: {exc}") from None
    if not isinstance(data, dict):
        raise EditkitError(f"hyperparameters in {path} must be a JSON object")
    return data
