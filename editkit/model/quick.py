"""A next-token answer without torch or transformers: the plain forward of a converted model, in numpy.

A warm `editkit predict` spent about 5 of its 7 s importing torch and transformers' model classes for a
forward of a tenth of a second. Here the same forward runs in numpy on the memory-mapped safetensors, with
the tokenizer's fast form read by `tokenizers` alone:

    answer = quick_top_k("gemma-3-270m", "The Eiffel Tower is located in the city of", k=3)
    answer  # list[Prediction], or None: then load the model (model/loading.py) and ask it

It answers only where it is the same computation as transformers' forward (tests/test_quick.py compares
the logits on a tiny random model of each family here and on the embedded model): a float32 folder editkit
converted (the shipped models, GGUF files; model/folders.py) of a model type in FORWARDS, with the default
rotary embedding and a supported activation, and a tokenizer whose fast form was checked to give
transformers' ids and decodings on its own (model/tokenizer_cache.py). Anything else returns None and
nothing is guessed.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import EditkitError
from ..core.timing import phase
from .families import FAMILIES, MODEL_TYPES, Family
from .folders import converted
from .prediction import Prediction
from .tokens import check_length, check_text


@dataclass(frozen=True)
class Forward:
    """What a forward computes beyond the layout its Family declares (model/families.py: module names,
    sandwich norms, the RMSNorm offset)."""

    embed_scale: bool = False  # Gemma multiplies the embeddings by sqrt(d_model)
    qk_norm: bool = False  # Gemma 3 and Qwen 3 normalise each head's q and k before the rotation
    windows: str = "none"  # layers with a sliding window: "layer_types", "all" (Mistral) or "none"
    scale_key: str | None = None  # the config key whose inverse square root scales q.k (default: head_dim)


# config.model_type -> its forward; the layout comes from families.MODEL_TYPES
FORWARDS = {
    "gemma3_text": Forward(embed_scale=True, qk_norm=True, windows="layer_types",
                           scale_key="query_pre_attn_scalar"),
    "llama": Forward(),
    "mistral": Forward(windows="all"),
    "qwen2": Forward(windows="layer_types"),
    "qwen3": Forward(qk_norm=True, windows="layer_types"),
}


def _silu(x: np.ndarray) -> np.ndarray:
    return np.asarray(x / (np.float32(1.0) + np.exp(-x)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh approximation (transformers' gelu_pytorch_tanh and gelu_new)."""
    inner = np.float32(math.sqrt(2 / math.pi)) * (x + np.float32(0.044715) * x ** 3)
    return np.asarray(np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner)))


ACTIVATIONS = {"silu": _silu, "swish": _silu, "gelu_pytorch_tanh": _gelu_tanh, "gelu_new": _gelu_tanh}


def quick_top_k(name: str, prompt: str, k: int) -> list[Prediction] | None:
    """The `k` likeliest next tokens of `prompt` under the model `name` (as `model.text.top_k` gives them),
    or None when this module cannot answer for that model (module docstring); bad input is refused as top_k
    refuses it."""
    check_text(prompt)
    if k < 1:
        raise EditkitError("top-k needs k >= 1")
    folder = converted(name)
    if folder is None or (ready := _ready(folder, folder.stat().st_mtime_ns)) is None:
        return None
    model, tok = ready
    ids = tok.encode(prompt, add_special_tokens=True).ids
    check_length(len(ids), model.max_length)
    with phase("forward"):
        logits = model.last_logits(ids)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    top = np.argsort(-probs, kind="stable")[:min(k, probs.size)]
    return [Prediction(tok.decode([int(t)], skip_special_tokens=False), int(t), float(probs[t]),
                       float(logits[t])) for t in top]


@functools.lru_cache(maxsize=2)
def _ready(folder: Path, mtime_ns: int) -> tuple[Decoder, Any] | None:
    """The folder's decoder and tokenizer, kept for the next question (a notebook asks several; a folder
    rebuilt under the same name has another time)."""
    from .tokenizer_cache import raw_tokenizer

    if (model := Decoder.of(folder)) is None:
        return None
    with phase("tokenizer"):
        tok = raw_tokenizer(folder)
    return None if tok is None else (model, tok)


class Weights:
    """A folder's safetensors tensors, memory-mapped: each is read from the page cache as the forward uses
    it."""

    def __init__(self, folder: Path):
        self.index: dict[str, tuple[np.memmap, int, dict[str, Any]]] = {}
        for file in sorted(folder.glob("*.safetensors")):
            raw = np.memmap(file, dtype=np.uint8, mode="r")
            size = int.from_bytes(raw[:8].tobytes(), "little")
            header = json.loads(raw[8:8 + size].tobytes())
            header.pop("__metadata__", None)
            self.index.update({key: (raw, 8 + size, entry) for key, entry in header.items()})

    def __contains__(self, key: str) -> bool:
        return key in self.index

    def dtypes(self) -> set[str]:
        return {entry["dtype"] for _, _, entry in self.index.values()}

    def __getitem__(self, key: str) -> np.ndarray:
        """The tensor `key` (float32 files only: Decoder.of checks)."""
        raw, base, entry = self.index[key]
        start, end = entry["data_offsets"]
        return raw[base + start:base + end].view(np.float32).reshape(entry["shape"])


class Decoder:
    """A decoder-only model's forward in float32 numpy, as transformers computes it for FORWARDS (one prompt,
    no padding, no cache: the logits at its last token), reading the weights by its Family's module names."""

    def __init__(self, config: dict[str, Any], forward: Forward, layout: Family, weights: Weights,
                 rope: list[float]):
        self.config, self.forward, self.layout, self.w = config, forward, layout, weights
        self.heads = int(config["num_attention_heads"])
        self.kv_heads = int(config.get("num_key_value_heads") or self.heads)
        self.head_dim = int(config.get("head_dim") or config["hidden_size"] // self.heads)
        self.eps = float(config["rms_norm_eps"])
        self.act = ACTIVATIONS[config.get("hidden_activation") or config["hidden_act"]]
        self.rope = rope  # each layer's rotary base
        self.windows = _windows(config, forward)
        scale = config.get(forward.scale_key) if forward.scale_key else None
        self.scale = float(scale or self.head_dim) ** -0.5
        positions = config.get("max_position_embeddings") or config.get("n_positions")
        self.max_length = int(positions) if positions else 2048
        self.embed = layout.embed + ".weight"
        head = layout.unembed + ".weight"
        self.head = head if head in weights else self.embed  # a tied head is saved once, as the embedding

    @staticmethod
    def of(folder: Path) -> Decoder | None:
        """The folder's decoder when this module computes it exactly as transformers does, else None."""
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        forward = FORWARDS.get(str(config.get("model_type")))
        if forward is None:
            return None
        layout = FAMILIES[MODEL_TYPES[str(config["model_type"])]]
        act = config.get("hidden_activation") or config.get("hidden_act")
        rope = _rope_bases(config)
        if act not in ACTIVATIONS or rope is None or config.get("attn_logit_softcapping"):
            return None
        weights = Weights(folder)
        untied = layout.unembed + ".weight" not in weights and not config.get("tie_word_embeddings")
        if weights.dtypes() != {"F32"} or untied:  # no head to read
            return None
        return Decoder(config, forward, layout, weights, rope)

    def last_logits(self, ids: list[int]) -> np.ndarray:
        """The logits (vocab,) at the last of `ids`."""
        x = self.w[self.embed][np.asarray(ids)].astype(np.float32)
        if self.forward.embed_scale:
            x *= np.float32(self.config["hidden_size"] ** 0.5)
        for layer in range(int(self.config["num_hidden_layers"])):
            x = self.block(x, layer)
        h = self.norm(x[-1:], self.layout.final_norm)
        logits = (h @ self.w[self.head].T)[0]
        if cap := self.config.get("final_logit_softcapping"):
            logits = np.tanh(logits / np.float32(cap)) * np.float32(cap)
        return np.asarray(logits)

    def block(self, x: np.ndarray, layer: int) -> np.ndarray:
        """One block: pre-norm attention and MLP, each output normalised first where the layout says so."""
        f = self.layout
        assert f.ln_attn is not None and f.ln_mlp is not None  # FORWARDS' layouts have both pre-norms
        h = self.attention(self.norm(x, f.ln_attn.format(layer)), layer, f.attn.format(layer) + ".")
        x = x + (self.norm(h, f.post_attn_norm.format(layer)) if f.post_attn_norm else h)
        h = self.mlp(self.norm(x, f.ln_mlp.format(layer)), f.mlp.format(layer) + ".")
        return np.asarray(x + (self.norm(h, f.post_mlp_norm.format(layer)) if f.post_mlp_norm else h))

    def norm(self, x: np.ndarray, module: str) -> np.ndarray:
        """RMSNorm: x / sqrt(mean(x^2) + eps) times (offset + w) (the layout's offset: Gemma 1, Llama 0)."""
        w = self.w[module + ".weight"]
        x = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(self.eps))
        return np.asarray(x * (np.float32(self.layout.norm_offset) + w))

    def linear(self, x: np.ndarray, key: str) -> np.ndarray:
        y = x @ self.w[key + ".weight"].T
        return np.asarray(y + self.w[key + ".bias"]) if key + ".bias" in self.w else np.asarray(y)

    def mlp(self, x: np.ndarray, p: str) -> np.ndarray:
        """down(act(gate(x)) * up(x))."""
        gated = self.act(self.linear(x, p + "gate_proj")) * self.linear(x, p + "up_proj")
        return self.linear(gated, p + "down_proj")

    def attention(self, x: np.ndarray, layer: int, p: str) -> np.ndarray:
        """Causal multi-head attention with grouped keys and values, rotary positions and the layer's
        window."""
        n, d = x.shape[0], self.head_dim
        q = self.linear(x, p + "q_proj").reshape(n, self.heads, d)
        k = self.linear(x, p + "k_proj").reshape(n, self.kv_heads, d)
        v = self.linear(x, p + "v_proj").reshape(n, self.kv_heads, d)
        if self.forward.qk_norm:
            q, k = self.norm(q, p + "q_norm"), self.norm(k, p + "k_norm")
        cos, sin = _rotation(n, d, self.rope[layer])
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        group = self.heads // self.kv_heads  # query head i reads key-value head i // group
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) * np.float32(self.scale)
        scores = np.where(_allowed(n, self.windows[layer]), scores, np.float32(-np.inf))
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        out = np.einsum("hqk,khd->qhd", weights, v).reshape(n, self.heads * d)
        return self.linear(out, p + "o_proj")


def _windows(config: dict[str, Any], forward: Forward) -> list[int | None]:
    """Each layer's sliding window (a query at i sees keys j with i - window < j <= i), None for full
    attention."""
    n, window = int(config["num_hidden_layers"]), config.get("sliding_window")
    if forward.windows == "all":
        return [window] * n
    types = config.get("layer_types") if forward.windows == "layer_types" else None
    return [window if types and types[i] == "sliding_attention" else None for i in range(n)]


def _rope_bases(config: dict[str, Any]) -> list[float] | None:
    """Each layer's rotary base when every layer uses the default rotation over the whole head, else None."""
    params = config.get("rope_parameters") or {"rope_theta": config.get("rope_theta", 10000.0),
                                               **(config.get("rope_scaling") or {})}
    per_type = all(isinstance(v, dict) for v in params.values())
    types = config.get("layer_types") or ["full_attention"] * int(config["num_hidden_layers"])
    chosen: list[dict[str, Any] | None] = [params.get(t) if per_type else params for t in types]
    if any(c is None or c.get("rope_type", c.get("type", "default")) != "default" for c in chosen):
        return None
    if float(config.get("partial_rotary_factor") or 1.0) != 1.0:
        return None
    return [float(c["rope_theta"]) for c in chosen if c is not None]


def _rotation(n: int, d: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of the rotary angles (positions, 1, head_dim), as transformers' default rope: each
    frequency base^(-2i/d) used twice (the two halves of the head)."""
    exponents = np.arange(0, d, 2, dtype=np.float32) / np.float32(d)
    inv = (1.0 / (np.float32(base) ** exponents)).astype(np.float32)
    angles = np.arange(n, dtype=np.float32)[:, None] * inv[None, :]
    angles = np.concatenate([angles, angles], axis=-1)[:, None, :]
    return np.cos(angles), np.sin(angles)


def _rotate_half(x: np.ndarray) -> np.ndarray:
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def _allowed(n: int, window: int | None) -> np.ndarray:
    """(1, n, n): query i may read key j (causal, and within the window when the layer has one)."""
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    ok = j <= i
    if window is not None:
        ok &= j > i - window
    return ok[None]
