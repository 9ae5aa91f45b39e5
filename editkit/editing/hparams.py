"""Hyperparameters from assets/hparams/<method>/<model>.json, validated, with user overrides."""
from __future__ import annotations

import json
import math

from ..errors import EditkitError
from ..paths import HPARAMS

METHODS = ("rome", "memit", "pmet")
POSITIVE = ("v_lr", "clamp_norm_factor", "v_num_grad_steps", "mom2_n_tokens", "context_length")
NON_NEGATIVE = ("v_weight_decay", "kl_factor", "mom2_update_weight", "nll_loss_factor", "context_templates",
                "v_stop_loss")


def _file_key(model_name: str) -> str:
    name = model_name.lower().rstrip("/").split("/")[-1]
    if name.startswith("tiny-"):
        return "tiny"
    return name.replace("eleutherai_", "").removesuffix("-hf")  # meta-llama/Llama-2-7b-hf -> llama-2-7b


def load_hparams(method: str, lm_or_name, overrides: dict | None = None) -> dict:
    method = method.lower()
    if method not in METHODS:
        raise EditkitError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    name = getattr(lm_or_name, "name", lm_or_name)
    path = HPARAMS / method / f"{_file_key(name)}.json"
    if not path.exists():
        have = sorted(p.stem for p in (HPARAMS / method).glob("*.json"))
        raise EditkitError(f"no {method} hyperparameters for '{name}' (have: {', '.join(have)}); pass a file with "
                           f"--hparams, copying the closest one and choosing layers from the model's causal traces")
    hp = json.loads(path.read_text())
    hp["file"] = str(path.relative_to(HPARAMS.parent.parent))
    hp.update(overrides or {})
    n_layers = getattr(getattr(lm_or_name, "adapter", None), "n_layers", None)
    return validate(hp, n_layers)


def load_hparams_file(path) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise EditkitError(f"cannot read hyperparameters {path}: {exc}") from None


def validate(hp: dict, n_layers: int | None = None) -> dict:
    layers = hp.get("layers")
    if not isinstance(layers, list) or not layers or not all(isinstance(l, int) and not isinstance(l, bool)
                                                               for l in layers):
        raise EditkitError(f"hyperparameter 'layers' must be a non-empty list of integers, not {layers!r}")
    if n_layers is not None and any(not 0 <= l < n_layers for l in layers):
        raise EditkitError(f"layers {layers} out of range: the model has layers 0..{n_layers - 1}")
    if layers != sorted(set(layers)):
        raise EditkitError("layers must be increasing and distinct")
    for key in POSITIVE + NON_NEGATIVE:
        if key not in hp:
            continue
        v = hp[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise EditkitError(f"hyperparameter '{key}' must be a finite number, not {v!r}")
        if key in POSITIVE and v <= 0 or key in NON_NEGATIVE and v < 0:
            raise EditkitError(f"hyperparameter '{key}' out of range: {v}")
    for key in ("v_num_grad_steps", "mom2_n_tokens", "context_templates", "context_length"):
        if key in hp:
            hp[key] = int(hp[key])
    if hp.get("v_num_grad_steps", 1) > 1000:
        raise EditkitError("v_num_grad_steps above 1000 is not allowed")
    return hp
