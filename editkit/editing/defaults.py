"""Per-model default hyperparameters: assets/hparams/<method>/<model>.json (chosen and validated, shipped), else
the user's $EDITKIT_CACHE/hparams/<method>/<model>.json (written by `python -m editkit hparams` for a model without
a shipped file, or by hand), found through the method registry and validated against the method's typed Hparams
(editing/hparams.py) and the model's layer count."""
from __future__ import annotations

import json
from pathlib import Path

from ..core.errors import EditkitError
from ..core.paths import cache_dir
from .hparams import Hparams, from_dict
from .methods import get


def _file_key(model_name: str) -> str:
    name = model_name.lower().rstrip("/").split("/")[-1].split("@")[0]  # "gemma-3-270m@bfloat16": gemma's files
    if name.startswith("tiny-"):
        return "tiny"
    return name.replace("eleutherai_", "").removesuffix("-hf")  # meta-llama/Llama-2-7b-hf -> llama-2-7b


def user_file(method: str, model_name: str) -> Path:
    """Where the user's hyperparameters of `method` for `model_name` live ($EDITKIT_CACHE/hparams/<method>/)."""
    return cache_dir("hparams", get(method).name) / f"{_file_key(model_name)}.json"


def shipped_file(method: str, model_name: str) -> Path:
    """Where the shipped hyperparameters of `method` for `model_name` would be (assets/hparams/<method>/)."""
    return get(method).defaults_dir / f"{_file_key(model_name)}.json"


def defaults_file(method: str, model_name: str) -> Path | None:
    """The file `load_hparams` reads for this method and model: the shipped one, else the user's, else None."""
    for path in (shipped_file(method, model_name), user_file(method, model_name)):
        if path.exists():
            return path
    return None


def load_hparams(method: str, lm_or_name, overrides: dict | None = None) -> Hparams:
    """The method's defaults for this model (defaults_file) with `overrides`, validated against the method's
    dataclass and the model's layer count."""
    spec = get(method)
    name = getattr(lm_or_name, "name", lm_or_name)
    path = defaults_file(spec.name, name)
    if path is None:
        have = sorted(p.stem for p in spec.defaults_dir.glob("*.json"))
        base = name.split("@")[0]
        raise EditkitError(f"no {spec.name} hyperparameters for '{name}' (have: {', '.join(have) or 'none'}); "
                           f"derive a starting set from its causal traces with `python -m editkit hparams --model "
                           f"{base}`, or pass a file with --hparams")
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
