"""What every trace shares: tokens, subject range, answer, the noise, and the clean and corrupted runs.

Notation (Meng et al. 2022, Sec. 2.1): the clean run gives P[o] (the *high* score), the corrupted run, with noise
added to the subject-token embeddings, gives P*[o] (the *low* score); restoring a state gives P*_clean h_i^l [o].
The indirect effect of a state is P*_clean h_i^l [o] - P*[o].
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import EditkitError
from ..hooks import Hooks, cache_layers, first_tensor
from ..scoring import target_ids
from ..text import check_prompt, find_subject_range, token_strings
from .noise import NoiseSpec, make_noise, noise_scale

KINDS = ("hidden", "mlp", "attn")


@dataclass
class TraceSetup:
    """Inputs of a trace and the states of its clean and corrupted runs."""

    prompt: str
    tokens: list[str]
    input_ids: torch.Tensor  # (1, T)
    subject_range: tuple[int, int]
    answer: str
    answer_id: int
    noise: torch.Tensor  # (n, subject tokens, d): the exact values added to (or replacing) the embeddings
    noise_spec: NoiseSpec
    scale: float
    seed: int = 1
    high_score: float = 0.0
    low_score: float = 0.0
    clean: dict | None = None  # name -> (1, T, d) clean states: "embed", "block.l", "mlp.l", "attn.l"
    corrupt: dict | None = None  # name -> (n, T, d) corrupted states (block inputs/outputs, module outputs)
    layer_kwargs: list | None = None  # per block: (extra positional args, keyword args) as the model calls it
    # The tokens before the subject are identical in every run (clean, corrupted, restored): their keys and values
    # are computed once (prefix_cache) and the engine runs only positions prefix_len.. (see engine.run_from).
    prefix_len: int = 0
    prefix_cache: object | None = None  # the model's own Cache holding positions [0, prefix_len), batch 1
    prefix_state: list | None = None  # [(cache layer, its attributes)]: the prefix-only state to rewind to
    suffix_kwargs: list | None = None  # per block: (args, kwargs) for the positions after the prefix

    @property
    def n(self) -> int:
        return self.noise.shape[0]


def corrupt_embeddings(setup: TraceSetup, rows: slice = slice(None)):
    """A function for Hooks.set_output on the embedding: noise on the subject tokens of the given rows."""
    b, e = setup.subject_range

    def fn(x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        noise = setup.noise.to(x.device, x.dtype)
        if setup.noise_spec.replace:
            x[rows, b:e] = noise
        else:
            x[rows, b:e] += noise
        return x

    return fn


def answer_prob(lm, h_last: torch.Tensor, answer_id: int) -> torch.Tensor:
    """p(answer) from residual vectors at the last position (rows, d): final norm + unembedding + softmax."""
    logits = lm.adapter.unembed(h_last).float()
    return torch.softmax(logits, -1)[:, answer_id]


def _names(lm) -> dict:
    a = lm.adapter
    mods = {"embed": a.embed}
    for l in range(a.n_layers):
        mods[f"block.{l}"] = a.block(l)
        mods[f"mlp.{l}"] = a.mlp(l)
        mods[f"attn.{l}"] = a.attn(l)
    return mods


@torch.no_grad()
def prepare(lm, prompt: str, subject: str, target: str | None = None, samples: int = 10,
            noise: NoiseSpec | None = None, seed: int = 1, occurrence: int = 0) -> TraceSetup:
    """Validate inputs, choose the answer, draw the noise, and run the clean and corrupted passes."""
    from .noise import parse_noise

    check_prompt(lm, prompt)
    if not isinstance(samples, int) or samples < 1 or samples > 1000:
        raise EditkitError("samples must be an integer between 1 and 1000")
    noise = noise or parse_noise("3s")
    b, e = find_subject_range(lm.tok, prompt, subject, occurrence)
    ids = lm.tok(prompt, add_special_tokens=True, return_tensors="pt")["input_ids"].to(lm.device)
    scale = noise_scale(lm, noise)
    unit = make_noise(seed, samples, e - b, lm.adapter.d_model, noise)
    setup = TraceSetup(prompt, token_strings(lm, prompt), ids, (b, e), "", -1, unit * scale, noise, scale, seed)

    a = lm.adapter
    mods = _names(lm)
    blocks = {l: a.block(l) for l in range(a.n_layers)}
    # Clean run: every state, the block call signatures, and the answer.
    with Hooks() as hooks:
        clean = hooks.capture(mods)
        block_in = hooks.capture({"block_in.0": a.block(0)}, what="input")
        args = hooks.block_args(blocks)
        body = getattr(lm.model, lm.model.base_model_prefix)
        h = body(input_ids=ids, use_cache=False).last_hidden_state
    logits = lm.adapter.unembed(h[:, -1], norm=False).float()
    if target is not None:
        tid = target_ids(lm.tok, target if target.startswith(" ") or not target.strip() else " " + target)
        setup.answer_id = tid[0]
    else:
        setup.answer_id = int(logits[0].argmax())
    setup.answer = lm.tok.decode([setup.answer_id])
    setup.high_score = float(torch.softmax(logits, -1)[0, setup.answer_id])
    setup.clean = {**clean, **block_in}
    setup.layer_kwargs = [args[l] for l in range(a.n_layers)]

    # Corrupted run: n rows with noise on the subject embeddings.
    with Hooks() as hooks:
        hooks.set_output(a.embed, corrupt_embeddings(setup))
        corrupt = hooks.capture(mods)
        corrupt_in = hooks.capture({"block_in.0": a.block(0)}, what="input")
        body = getattr(lm.model, lm.model.base_model_prefix)
        h = body(input_ids=ids.repeat(samples, 1), use_cache=False).last_hidden_state
    setup.corrupt = {**corrupt, **corrupt_in}
    setup.low_score = float(torch.softmax(lm.adapter.unembed(h[:, -1], norm=False).float(), -1)[:, setup.answer_id].mean())
    if b > 0:
        _prepare_prefix(lm, setup, b)
    return setup


@torch.no_grad()
def _prepare_prefix(lm, setup: TraceSetup, P: int) -> None:
    """Keys/values of the P tokens before the subject (one row: they are the same in every run), and the block
    arguments for running only positions P..T-1 on top of them. Left off (prefix_len 0) when the model's cache
    does not expose its layers, so the engine runs every position as before."""
    a = lm.adapter
    body = getattr(lm.model, lm.model.base_model_prefix)
    ids = setup.input_ids
    T = ids.shape[1]
    cache = body(input_ids=ids[:, :P], position_ids=torch.arange(P, device=ids.device)[None],
                 use_cache=True).past_key_values
    layers = cache_layers(cache)
    if len(layers) != a.n_layers:
        return
    state = [(layer, dict(layer.__dict__)) for layer in layers]
    try:
        with Hooks() as hooks:
            args = hooks.block_args({l: a.block(l) for l in range(a.n_layers)})
            body(input_ids=ids[:, P:], position_ids=torch.arange(P, T, device=ids.device)[None],
                 past_key_values=cache, use_cache=True)
    finally:
        for layer, attrs in state:
            layer.__dict__.clear()
            layer.__dict__.update(attrs)
    kwargs = [args[l] for l in range(a.n_layers)]
    setup.prefix_len, setup.prefix_cache, setup.prefix_state, setup.suffix_kwargs = P, cache, state, kwargs


def window_layers(layer: int, window: int, n_layers: int) -> range:
    """ROME's window around `layer`: [l - w//2, l - (-w // 2)) clipped to the model, e.g. [l-5, l+5) for w=10."""
    return range(max(0, layer - window // 2), min(n_layers, layer - (-window // 2)))


def module_for(lm, kind: str, layer: int):
    a = lm.adapter
    return {"hidden": a.block, "mlp": a.mlp, "attn": a.attn}[kind](layer)


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise EditkitError(f"kind must be one of {', '.join(KINDS)} (or 'all'), not {kind!r}")


__all__ = ["TraceSetup", "prepare", "answer_prob", "window_layers", "module_for", "first_tensor", "KINDS"]
