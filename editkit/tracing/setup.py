"""What every trace shares: tokens, subject range, answer, the noise, and the clean and corrupted runs.

Notation (Meng et al. 2022, Sec. 2.1): the clean run gives P[o] (the *high* score), the corrupted run, with noise
added to the subject-token embeddings, gives P*[o] (the *low* score); restoring a state gives P*_clean h_i^l [o].
The indirect effect of a state is P*_clean h_i^l [o] - P*[o].
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..core.errors import EditkitError
from ..model.kv import KV
from ..model.scoring import target_ids
from ..model.sites import site
from ..model.tokens import check_prompt, find_subject_range, token_strings
from .noise import NoiseSpec, make_noise, noise_scale
from .spec import TraceSpec


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
    low_sd: float | None = None  # the sample spread of p(answer) over the corrupted runs (None with one run)
    clean: dict | None = None  # site name -> (1, T, d) clean states ("resid_pre.0", "resid_post.l", "mlp_out.l", ...)
    corrupt: dict | None = None  # site name -> (n, T, d) corrupted states
    calls: list | None = None  # per block: how the model calls it on the whole prompt (runner.forward(calls=True))
    # The tokens before the subject are identical in every run (clean, corrupted, restored): their keys and values
    # are computed once (prefix_kv, one row) and the engine runs only positions prefix_len.. (see engine.run_from).
    prefix_len: int = 0
    prefix_kv: KV | None = None
    suffix_calls: list | None = None  # per block: the calls for the positions after the prefix
    # Keys/values of every position of every corrupted sample (n rows): a restoration at token t leaves positions < t
    # exactly as in its sample's corrupted run, so the engine computes only positions t.. on top of these (None when
    # the model's cache does not expose them: the engine then computes every position).
    corrupt_kv: KV | None = None
    corrupt_graph: tuple | None = field(default=None, repr=False)  # (p per row, states) with autograd, see build
    _calls_after: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, lm, spec: TraceSpec, gradients: bool = False) -> "TraceSetup":
        """Validate the spec's inputs, choose the answer, draw the noise, and run the clean and corrupted passes
        (the window and kinds play no part). gradients=True keeps the corrupted pass's autograd graph
        (corrupt_graph) for the attribution preview's backward, so the preview needs no forward of its own."""
        return _build(lm, spec, gradients)

    @property
    def n(self) -> int:
        return self.noise.shape[0]

    def state(self, kind: str, layer: int, run: str = "corrupt") -> torch.Tensor:
        """The (rows, T, d) state of a tracing kind ("hidden", "mlp", "attn") at `layer` in the clean or
        corrupted run."""
        return (self.clean if run == "clean" else self.corrupt)[site(kind, layer).name]

    def block_input(self, layer: int, run: str = "corrupt") -> torch.Tensor:
        """The residual entering block `layer` (the embedding output plus any position embedding for layer 0);
        layer = n_layers gives the last block's output."""
        states = self.clean if run == "clean" else self.corrupt
        return states["resid_pre.0"] if layer == 0 else states[f"resid_post.{layer - 1}"]

    def calls_after(self, lm, base: int) -> list:
        """Block calls for running positions base..T-1 on top of `base` cached positions (recorded once per base;
        base 0 = the whole prompt without a cache)."""
        if base == 0:
            return self.calls
        if base not in self._calls_after:
            self._calls_after[base] = lm.runner.block_calls(
                batch=1, length=self.input_ids.shape[1] - base, kv=self.corrupt_kv.rows([0]).prefix(base))
        return self._calls_after[base]


def corrupt_embeddings(setup: TraceSetup, rows: slice = slice(None)):
    """A function for Hooks.set on the embedding: noise on the subject tokens of the given rows."""
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


def _sites(lm) -> list[str]:
    out = ["embed", "resid_pre.0"]
    for l in range(lm.adapter.n_layers):
        out += [f"resid_post.{l}", f"mlp_out.{l}", f"attn_out.{l}"]
    return out


@torch.no_grad()
def _build(lm, spec: TraceSpec, gradients: bool = False) -> TraceSetup:
    """TraceSetup.build (see there)."""
    check_prompt(lm, spec.prompt)
    samples = spec.samples
    if not isinstance(samples, int) or samples < 1 or samples > 1000:
        raise EditkitError("samples must be an integer between 1 and 1000")
    b, e = find_subject_range(lm.tok, spec.prompt, spec.subject, spec.occurrence)
    ids = lm.tok(spec.prompt, add_special_tokens=True, return_tensors="pt")["input_ids"].to(lm.device)
    scale = noise_scale(lm, spec.noise)
    unit = make_noise(spec.seed, samples, e - b, lm.adapter.d_model, spec.noise)
    setup = TraceSetup(spec.prompt, token_strings(lm, spec.prompt), ids, (b, e), "", -1, unit * scale, spec.noise,
                       scale, spec.seed)
    run = lm.runner
    # Clean run: every state, the block calls, and the answer.
    clean = run.read(_sites(lm), full=True, input_ids=ids, calls=True)
    logits = run.logits(clean.hidden[:, -1], norm=False)
    target = spec.target
    if target is not None:
        tid = target_ids(lm.tok, target if target.startswith(" ") or not target.strip() else " " + target)
        setup.answer_id = tid[0]
    else:
        setup.answer_id = int(logits[0].argmax())
    setup.answer = lm.tok.decode([setup.answer_id])
    setup.high_score = float(torch.softmax(logits, -1)[0, setup.answer_id])
    setup.clean, setup.calls = dict(clean), clean.calls

    # Corrupted run: n rows with noise on the subject embeddings.
    noisy = corrupt_embeddings(setup)
    with torch.set_grad_enabled(gradients):
        embed = (lambda x: noisy(x.detach()).requires_grad_(True)) if gradients else noisy
        states = run.read(_sites(lm), full=True, detach=not gradients, edit=lambda hooks: hooks.set("embed", embed),
                          input_ids=ids.repeat(samples, 1), keep_kv=True)
        p = run.answer_logprob(states.hidden[:, -1], setup.answer_id, norm=False).exp()
    if gradients:
        setup.corrupt_graph = (p, dict(states))
    setup.corrupt = {name: value.detach() for name, value in states.items()}
    kv = states.kv
    setup.corrupt_kv = None if kv is None else KV(tuple(k.detach() for k in kv.keys),
                                                   tuple(v.detach() for v in kv.values))
    setup.low_score = float(p.detach().mean())
    setup.low_sd = float(p.detach().std()) if samples > 1 else None
    if b > 0:
        _build_prefix(lm, setup, b)
    return setup


@torch.no_grad()
def _build_prefix(lm, setup: TraceSetup, P: int) -> None:
    """Keys/values of the P tokens before the subject (one row: they are the same in every run), and the block calls
    for running only positions P..T-1 on top of them. Left off (prefix_len 0) when the model's cache does not
    expose every layer's keys, so the engine runs every position as before."""
    run = lm.runner
    ids = setup.input_ids
    kv = run.forward(input_ids=ids[:, :P], keep_kv=True).kv
    if kv is None:
        return
    setup.suffix_calls = run.block_calls(batch=1, length=ids.shape[1] - P, kv=kv)
    setup.prefix_len, setup.prefix_kv = P, kv


def window_layers(layer: int, window: int, n_layers: int) -> range:
    """ROME's window around `layer`: [l - w//2, l - (-w // 2)) clipped to the model, e.g. [l-5, l+5) for w=10."""
    return range(max(0, layer - window // 2), min(n_layers, layer - (-window // 2)))


__all__ = ["TraceSetup", "window_layers"]
