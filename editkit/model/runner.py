"""The runner: every way editkit runs part of a model, in one place.

    run = lm.runner
    out = run.forward(input_ids=ids, keep_kv=True, calls=True)   # hidden (final-normed), kv, block calls
    got = run.read(["mlp_key.5", "resid_post.3"], input_ids=ids) # those sites' tensors; stops once all are read
    z = run.full_logits(input_ids=ids)                            # (B, T, V) float32 logits of a whole run
    run.forward(input_ids=ids, stop_after="mlp_key.5")           # stop once that site is computed
    h = run.run_blocks(h, start=6, calls=out.calls, kv=prefix)   # blocks 6.. on given residuals
    h = run.step(h, 6, calls, kv=(keys, values))                  # block 6 alone, with per-row keys/values
    lp = run.answer_logprob(h[:, -1], answer_id)                  # log p(answer) = z_a - logsumexp(z), batched
    z = run.logits(h, norm=True)                                  # W_U final_norm(h) (+ softcap): the vocabulary
    texts = run.complete(prompts, Decoding.sampled(40, seed=0))   # continuations (greedy or seeded top-k)

- `read` is hooks and a run as one call: the tensors at the given sites (editkit/model/sites.py), the run
  stopped as soon as every one is read (or run to the end with `full=True`, keeping the final hidden state);
  `edit(hooks)` may register overwrites in the same context first (an intervention read in the same pass).
- `forward` runs the model body (the only code that knows `base_model_prefix` is adapter.body). It can stop right
  after a site (one stop mechanism: an exception raised by a hook of the caller's context), continue from a
  key/value prefix (`kv`), return the keys and values it computed (`keep_kv`), and record how it called each
  decoder block (`calls`: rotary embeddings, masks, positions) for running blocks by hand later.
- `KV` is an immutable snapshot of a run's keys and values. Every run that continues from it gets a fresh HF cache
  holding a copy (`KV.cache()`), so nothing ever has to be rewound: the snapshot is the rewind point.
- `run_blocks` calls the model's own decoder blocks from a layer on, with the recorded calls and a KV prefix; patches
  and reads go through Hooks (editkit/model/hooks.py) as for a full forward.
- `step` runs ONE block on its own, attending to per-row keys/values of that layer only (each row may continue a
  different earlier run): a caller can then step many partial runs layer by layer, adding rows as they start.
- `logits` is the one projection to the vocabulary (final norm, LM head with the weight this context sees, softcap);
  `answer_logprob` walks the vocabulary in blocks for all rows at once with an online logsumexp (`vocab_pass`: one
  read of the unembedding matrix in all, no (N, V) matrix).
- `complete` continues prompts (greedy, or top-k sampled from a private seeded stream: `Decoding`), with the same
  `edit(hooks)` as `read` for an intervention that must act during the generation; a generation of a few prompts
  computes the LM head with the weight on the left (`_head_by_rows`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..core.errors import EditkitError
from .hooks import Hooks, first_tensor
from .interventions import check_whole
from .sites import parse
from .tokens import encode

if TYPE_CHECKING:
    from .loading import LM

# how the model called each block: per layer (the positional args after the hidden state, the kwargs), None
# where a block was not seen
BlockCalls = list[tuple[tuple[Any, ...], dict[str, Any]] | None]
Edit = Callable[[Hooks], None]  # registers overwrites on a run's Hooks (Runner.read's `edit`)

UNEMBED_ROWS = 512  # rows per unembedding chunk: (512 x d) @ (d x V) reads the matrix once per 512 rows
VOCAB_BLOCK = 4096  # vocabulary tokens per block of the online logsumexp (vocab_pass): the block's logits stay in cache
SUM_COLUMNS = 512  # vocab_pass and vocab_pass_bf16 sum a block's exponentials in float64 this many columns at a time
# up to this many rows the LM head's product is computed as W x^T (Runner.logits, and a generation's steps:
# Runner._head_by_rows): on Gemma's 262k x 640 head MKL's float32 x W^T takes 1.6-5.5x as long at 3-16 rows, about
# the same at 32-64, less from 256 (benchmarks/head_rows.py)
HEAD_BY_ROWS = 16


@dataclass(frozen=True)
class Decoding:
    """How `Runner.complete` continues prompts: greedy (top_k None), or top-k sampling from a private random stream
    seeded with `seed` (SeededTopK); at most `new_tokens` new tokens, and no end-of-text before `min_new_tokens`."""

    new_tokens: int
    top_k: int | None = None
    seed: int = 0
    min_new_tokens: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.new_tokens, int) or self.new_tokens < 0:
            raise EditkitError("the number of new tokens must be a non-negative integer")
        if self.top_k is not None and (not isinstance(self.top_k, int) or self.top_k < 1):
            raise EditkitError("top-k sampling needs k >= 1")

    @classmethod
    def greedy(cls, new_tokens: int) -> Decoding:
        return cls(new_tokens)

    @classmethod
    def sampled(cls, new_tokens: int, seed: int = 0, top_k: int = 5, min_new_tokens: int = 0) -> Decoding:
        return cls(new_tokens, top_k, seed, min_new_tokens)


class SeededTopK:
    """Top-k sampling as a greedy step, with a private random stream: argmax_x (log p_k(x) + g_x), g_x ~ Gumbel(0, 1),
    is a sample from p_k, the softmax restricted to the k most likely tokens (the Gumbel-max trick). The noise comes
    from this call's own torch.Generator, never from torch's global generator, which every thread of a served app
    shares: two sessions sampling at once with the same seed each get exactly their single-threaded text."""

    def __init__(self, k: int, seed: int):
        self.k = k
        self.gen = torch.Generator(device="cpu").manual_seed(int(seed))

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.float()
        kth = scores.topk(min(self.k, scores.shape[-1]), dim=-1).values[..., -1:]
        logp = scores.masked_fill(scores < kth, float("-inf")).log_softmax(-1)
        u = torch.rand(scores.shape, generator=self.gen).clamp_(min=1e-20, max=1 - 1e-7).to(scores.device)
        return logp - torch.log(-torch.log(u))


class Stop(Exception):
    """Raised by a hook to end a forward pass once what the caller needs is computed."""


@dataclass(frozen=True)
class KV:
    """Keys and values of positions [0, length) of a run, per layer (rows, kv_heads, length, head_dim)."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[-2]) if self.keys else 0

    @property
    def batch(self) -> int:
        return int(self.keys[0].shape[0]) if self.keys else 0

    def rows(self, index: int | torch.Tensor | list[int]) -> KV:
        """The rows `index` (a tensor/list, repeats allowed) of every layer; an int broadcasts one row (no copy)."""
        if isinstance(index, int):
            if self.batch != 1:
                raise EditkitError("only a one-row KV can be broadcast")
            return KV(tuple(k.expand(index, *k.shape[1:]) for k in self.keys),
                      tuple(v.expand(index, *v.shape[1:]) for v in self.values))
        index = torch.as_tensor(index, device=self.keys[0].device)
        return KV(tuple(k.index_select(0, index) for k in self.keys),
                  tuple(v.index_select(0, index) for v in self.values))

    def prefix(self, length: int) -> KV:
        """The keys and values of positions [0, length) (views, no copy)."""
        return KV(tuple(k[..., :length, :] for k in self.keys), tuple(v[..., :length, :] for v in self.values))

    def cache(self, config: Any) -> Any:
        """A fresh HF cache holding these keys and values (runs append to it; this snapshot never changes)."""
        from transformers import DynamicCache

        cache = DynamicCache(config=config)
        for layer, k, v in zip(_layers(cache, len(self.keys)), self.keys, self.values):
            layer.update(k, v)
        return cache

    @classmethod
    def from_cache(cls, cache: Any, n_layers: int) -> KV | None:
        """The snapshot of an HF cache, or None when it does not hold every position of every layer (a sliding
        window that dropped tokens, a cache that does not expose its layers)."""
        layers = _layers(cache, n_layers)
        if len(layers) != n_layers or not all(getattr(l, "keys", None) is not None for l in layers):
            return None
        seen = {int(l.keys.shape[-2]) for l in layers}
        total = {int(getattr(l, "cumulative_length", l.keys.shape[-2])) for l in layers}
        if len(seen) != 1 or seen != total:
            return None
        return cls(tuple(l.keys for l in layers), tuple(l.values for l in layers))


def _layers(cache: Any, n_layers: int) -> list[Any]:
    cache = getattr(cache, "self_attention_cache", cache)  # an encoder-decoder wrapper
    layers = list(getattr(cache, "layers", []))
    return layers[:n_layers]


@dataclass
class Output:
    hidden: torch.Tensor | None  # last_hidden_state (after the final norm), None when stopped early
    kv: KV | None = None  # keys/values of every position run (with the prefix), when keep_kv
    calls: BlockCalls | None = None  # per layer, how the model called the block


def _swap_cache(args: tuple[Any, ...], kwargs: dict[str, Any],
                cache: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The recorded block call with its cache object replaced by `cache`."""
    from transformers import Cache

    found = False
    new_kwargs = {}
    for key, value in kwargs.items():
        if isinstance(value, Cache):
            value, found = cache, True
        new_kwargs[key] = value
    new_args = tuple(cache if isinstance(a, Cache) else a for a in args)
    found = found or any(isinstance(a, Cache) for a in args)
    if cache is not None and not found:
        raise EditkitError("these block calls were recorded without a key/value cache; record them with one")
    return new_args, new_kwargs


class Runner:
    """Partial runs of one model (see module docstring)."""

    def __init__(self, lm: LM) -> None:
        self.lm = lm
        self.adapter = lm.adapter
        self.config = lm.model.config

    # --- whole-body runs ---------------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor | None = None, *, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None,
                kv: KV | None = None, stop_after: str | None = None, keep_kv: bool = False,
                calls: bool = False) -> Output:
        """Run the body (see module docstring). With `kv`, the inputs are the positions after it: position ids
        default to kv.length + 0, 1, ...; an attention mask, if given, covers kv and inputs."""
        a = self.adapter
        if kv is not None:
            check_whole("a run continued from cached keys and values")
        cache = kv.cache(self.config) if kv is not None else None
        if kv is not None and position_ids is None:
            first = input_ids if input_ids is not None else inputs_embeds
            assert first is not None, "forward needs input_ids or inputs_embeds"
            width = first.shape[1]
            position_ids = torch.arange(kv.length, kv.length + width, device=self.lm.device)[None]
        use_cache = keep_kv or cache is not None
        stopped = False
        with Hooks(self.lm) as hooks:
            recorded = hooks.block_args({l: a.block(l) for l in range(a.n_layers)}) if calls else None
            if stop_after is not None:
                hooks.set(parse(stop_after), _raise_stop, "output")
            try:
                out = a.body(input_ids=input_ids, inputs_embeds=inputs_embeds, attention_mask=attention_mask,
                             position_ids=position_ids, past_key_values=cache, use_cache=use_cache)
            except Stop:
                stopped, out = True, None
        result = Output(None if stopped else out.last_hidden_state)
        if recorded is not None:
            result.calls = [recorded.get(l) for l in range(a.n_layers)]
        if keep_kv and not stopped:
            result.kv = KV.from_cache(out.past_key_values, a.n_layers)
        return result

    def read(self, sites: Any, *, full: bool = False, detach: bool = True, edit: Edit | None = None,
             what: str = "output", **inputs: Any) -> Reading:
        """The tensors at `sites` (a list of site names, or a dict name -> site or module; a module is read at its
        output, or its first input with what="input") in one run of the body on `inputs` (forward's arguments).
        The run stops once every tensor is read, unless `full` (then `.hidden` holds the final-normed state).
        `edit(hooks)`, when given, registers overwrites (Hooks.set/patch) in the same context before the run."""
        n = len(sites)
        with Hooks(self.lm) as hooks:
            if edit is not None:
                edit(hooks)
            got = hooks.capture(sites, what=what, detach=detach,
                                then=None if full else (lambda cache: _stop_when(len(cache) >= n)))
            try:
                out = self.forward(**inputs)
            except Stop:
                out = Output(None)
        missing = [name for name in (sites if isinstance(sites, dict) else [parse(s).name for s in sites])
                   if name not in got]
        if missing:
            raise EditkitError(f"the run never reached {', '.join(missing)}")
        return Reading(got, out.hidden, out.kv, out.calls)

    def full_logits(self, *, edit: Edit | None = None, **inputs: Any) -> torch.Tensor:
        """Logits (B, T, V) of a whole run on `inputs` (forward's arguments), float32, as the model's own head
        computes them from the final-normed state; `edit(hooks)` as in `read` (a patched run's logits)."""
        hidden = (self.hidden(**inputs) if edit is None else
                  self.read({}, full=True, edit=edit, **inputs).hidden)
        assert hidden is not None, "a full run has a final state"
        return self.logits(hidden, norm=False)

    @torch.no_grad()
    def check_layout(self, ids: tuple[int, ...] = (2, 3, 5, 7, 11, 13)) -> None:
        """The adapter's declared layout holds on this model, on one short run: every block's output is its input
        plus what attention and the MLP write (h_l = h_{l-1} + attn_write.l + mlp_write.l, the decomposition
        tracing and editing rest on), and `logits` of the last block's output are the model's own logits. A model
        type mapped onto a family it does not fit (a residual multiplier, a logit scale, a block that adds its
        residual inside the MLP) is refused here with the numbers, instead of giving wrong traces and edits."""
        a, L = self.adapter, self.adapter.n_layers
        vocab = min(a.vocab_size, int(getattr(self.config, "vocab_size", a.vocab_size) or a.vocab_size))
        input_ids = torch.tensor([[i % vocab for i in ids]], device=self.lm.device)
        kinds = ("resid_pre", "attn_write", "mlp_write", "resid_post")
        with Hooks(self.lm) as hooks:  # the sites and the model's own logits from one run of the whole model
            got = hooks.capture([f"{k}.{l}" for l in range(L) for k in kinds])
            own = self.lm.model(input_ids=input_ids).logits.double().cpu()
        tolerance = 1e-4 if self.lm.dtype in (torch.float32, torch.float64) else 3e-2
        for l in range(L):
            pre, attn, mlp, post = (got[f"{k}.{l}"].double().cpu() for k in kinds)
            _within(post, pre + attn + mlp, tolerance, f"block {l}'s output is not its input plus what attention "
                    "and the MLP write")
        _within(own, self.logits(got[f"resid_post.{L - 1}"]).double().cpu(), tolerance,
                "the final norm and head of the last block's output are not the model's logits")

    def hidden(self, **inputs: Any) -> torch.Tensor:
        """The final-normed last hidden state of a full run."""
        hidden = self.forward(**inputs).hidden
        assert hidden is not None, "a run without stop_after has a final state"
        return hidden

    @torch.no_grad()
    def complete(self, prompts: str | list[str] | dict[str, torch.Tensor], decoding: Decoding, *,
                 edit: Edit | None = None) -> Generated:
        """The new text of each continuation of `prompts`: a string or a list of strings (tokenized with the model's
        special tokens, left-padded so every row ends at its prompt), or a batch dict with input_ids and
        attention_mask. Decoded with Hugging Face's generation loop, so the model's own cache and end-of-text
        tokens apply; `edit(hooks)` registers overwrites for the whole generation, as in `read`. Returns a list of
        str with `.ids`, the new token ids (B, n), rows that ended early padded with the pad id."""
        from transformers import LogitsProcessorList


        batch = prompts if isinstance(prompts, dict) else encode(self.lm, prompts, pad_side="left")
        ids, mask = batch["input_ids"], batch.get("attention_mask")
        if decoding.new_tokens == 0:
            return Generated([""] * ids.shape[0], ids[:, :0])
        check_whole("a generation (one token at a time after the prompt)")
        sampler = [SeededTopK(decoding.top_k, decoding.seed)] if decoding.top_k is not None else []
        with Hooks(self.lm) as hooks:
            if edit is not None:
                edit(hooks)
            if ids.shape[0] <= HEAD_BY_ROWS:
                self._head_by_rows(hooks)
            out = self.lm.model.generate(
                input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=decoding.new_tokens,
                min_new_tokens=decoding.min_new_tokens, logits_processor=LogitsProcessorList(sampler),
                pad_token_id=self.lm.tok.pad_token_id, top_k=None, top_p=None, temperature=None)
        new = out[:, ids.shape[1]:]
        return Generated(self.lm.tok.batch_decode(new, skip_special_tokens=True), new)

    def _head_by_rows(self, hooks: Hooks) -> None:
        """In this context's runs of the whole model (a generation's steps), the LM head's product as W x^T, the
        weight on the left, instead of x W^T: for a few rows (a generation projects one row per prompt at every
        step) MKL's float32 GEMM with the rows on the left runs several times slower than one read of a large
        vocabulary's weight (measured in docs/results/speed.md). The head's input is taken by a pre-hook and
        handed on with no positions, so the module's own product computes nothing, and the output hook computes it
        with the weight this context sees (an edit of the head, whose own hook then sees no positions, counts; no
        site names the head, so nothing else hooks it). The same map; a logit may differ in its last bit."""
        head = self.adapter.unembed_module
        if not isinstance(head, torch.nn.Linear):
            return
        kept: list[torch.Tensor] = []

        def take(mod: torch.nn.Module, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
            x = args[0] if args else next(iter(kwargs.values()))
            kept.append(x)
            empty = x.narrow(-2, 0, 0) if x.dim() >= 2 else x[:0]
            return ((empty,) + tuple(args[1:]), kwargs) if args else (args, {**kwargs, next(iter(kwargs)): empty})

        def give(mod: torch.nn.Module, args: tuple[Any, ...], output: Any) -> torch.Tensor:
            x = kept.pop()
            W, bias = self._head_weight()
            return _head_product(x, W.to(x.dtype), bias)

        hooks.add_hook(head, take, "input")
        hooks.add_hook(head, give, "output")

    # --- block-level runs --------------------------------------------------------------------------------------
    def run_blocks(self, h: torch.Tensor, start: int, calls: BlockCalls, kv: KV | None = None,
                   stop: int | None = None) -> torch.Tensor:
        """Blocks start..stop-1 (default: to the last) on residuals h (B, T, d), called as recorded in `calls`,
        attending to a fresh copy of `kv` (the positions before h). Returns the residual after the last block run
        (not normed)."""
        check_whole("a run of blocks on given residuals")
        a = self.adapter
        stop = a.n_layers if stop is None else stop
        cache = kv.cache(self.config) if kv is not None else None
        for l in range(start, stop):
            call = calls[l]
            if call is None:
                raise EditkitError(f"no recorded call for block {l}")
            args, kwargs = _swap_cache(*call, cache)
            h = first_tensor(a.block(l)(h, *args, **kwargs))
        return h

    def step(self, h: torch.Tensor, layer: int, calls: BlockCalls,
             kv: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Block `layer` alone on residuals h (B, T, d), called as recorded in `calls` (recorded with a KV prefix of
        the same length as kv's, or without one when kv is None), attending to kv = (keys, values) of THIS layer,
        (B, kv_heads, P, head_dim), one row per row of h. Returns the block's output residual. Only this layer's
        keys are copied into the fresh cache the block appends to, so stepping many rows through the layers one
        block at a time costs no more than run_blocks."""
        check_whole("a block stepped on its own")
        call = calls[layer]
        if call is None:
            raise EditkitError(f"no recorded call for block {layer}")
        cache = None
        if kv is not None:
            from transformers import DynamicCache

            cache = DynamicCache(config=self.config)
            layers = _layers(cache, self.adapter.n_layers)
            if len(layers) <= layer:
                raise EditkitError("this model's cache does not expose its layers; step without keys/values")
            layers[layer].update(kv[0], kv[1])
        args, kwargs = _swap_cache(*call, cache)
        return first_tensor(self.adapter.block(layer)(h, *args, **kwargs))

    def block_calls(self, batch: int, length: int, kv: KV | None = None,
                    attention_mask: torch.Tensor | None = None,
                    position_ids: torch.Tensor | None = None) -> BlockCalls:
        """How the model calls each block for `batch` rows of `length` new positions after `kv`: recorded from a
        cheap run on zero embeddings (the calls depend on shapes, positions and masks, not on values)."""
        x = torch.zeros(batch, length, self.adapter.d_model, device=self.lm.device,
                        dtype=next(self.lm.model.parameters()).dtype)
        with torch.no_grad():
            calls = self.forward(inputs_embeds=x, kv=kv, attention_mask=attention_mask,
                                 position_ids=position_ids, calls=True).calls
        assert calls is not None, "forward(calls=True) records the calls"
        return calls

    # --- the vocabulary ----------------------------------------------------------------------------------------
    def logits(self, h: torch.Tensor, norm: bool = True) -> torch.Tensor:
        """Logits (float32; float64 for a float64 model) of residuals h (..., d): z = W_U final_norm(h) + b, with
        Gemma 2's softcap cap * tanh(z / cap); norm=False for states already through the final norm (a forward's
        `hidden`). The head's weight is the one this context sees (weights.current), so an applied edit of the
        unembedding counts; gradients flow to h. An LM head that is not a plain linear map is called as a module."""
        a = self.adapter
        x = a.final_norm(h) if norm else h
        head = a.unembed_module
        if isinstance(head, torch.nn.Linear):
            W, bias = self._head_weight()
            z = _head_product(x, W, bias)
        else:
            z = head(x)
        if a.final_softcap:
            z = torch.tanh(z / a.final_softcap) * a.final_softcap
        return _at_least_f32(z)

    def answer_logprob(self, h: torch.Tensor, answer_id: int | torch.Tensor, norm: bool = True,
                       block: int = VOCAB_BLOCK, rows: int = 4096, top: bool = False,
                       fast: bool = False) -> Any:
        """log softmax(logits(h))[answer] = z_answer - logsumexp(z) for residual rows h (N, d), float32.

        The vocabulary is walked in blocks of `block` tokens for ALL rows at once, keeping a running max and sum of
        exponentials (the online logsumexp): each block's logits (N x block) are still in the CPU cache when they
        are exponentiated, the unembedding matrix is read once for all N rows, and no (N x V) matrix is ever
        written (more than `rows` rows go in chunks of `rows`, to bound memory). The weight is the one this context
        sees (weights.current), so an applied edit of the unembedding counts; an LM head that is not a plain
        linear map is projected row-chunk by row-chunk. With `top`: (log-probabilities, argmax token of each row),
        the argmax read in the same pass (EasyEdit's token accuracies compare it). `fast`: the logits in bfloat16
        matmuls (vocab_pass_bf16, an approximation: the tracing engine's fast mode)."""
        ids = torch.as_tensor(answer_id, device=h.device)
        ids = ids.expand(h.shape[0]) if ids.dim() == 0 else ids
        head = self.adapter.unembed_module
        if not isinstance(head, torch.nn.Linear) or h.shape[0] == 0:
            parts, tops = [], []
            for i in range(0, h.shape[0], UNEMBED_ROWS):
                z = self.logits(h[i:i + UNEMBED_ROWS], norm)
                parts.append(z.gather(1, ids[i:i + UNEMBED_ROWS, None])[:, 0] - torch.logsumexp(z, -1))
                tops.append(z.argmax(-1))
            lp = torch.cat(parts) if parts else torch.zeros(0)
            return (lp, torch.cat(tops) if tops else torch.zeros(0, dtype=torch.long)) if top else lp
        if h.shape[0] > rows:
            parts = [self.answer_logprob(h[i:i + rows], ids[i:i + rows], norm, block, rows, top, fast)
                     for i in range(0, h.shape[0], rows)]
            if top:
                return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
            return torch.cat(parts)
        x = self.adapter.final_norm(h) if norm else h
        W, bias = self._head_weight()
        if fast and not top and x.dtype == torch.float32:
            lse_bf16, answer_bf16 = vocab_pass_bf16(x, W, bias, self.adapter.final_softcap, ids, block)
            return (answer_bf16 - lse_bf16).float()
        lse, answer, _, best = vocab_pass(x, W, bias, self.adapter.final_softcap, ids=ids, block=block,
                                          argmax=top)
        assert answer is not None
        out = answer - lse
        out = out if x.dtype == torch.float64 else out.float()
        return (out, best) if top else out

    def _head_weight(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The LM head's weight as this context sees it (weights.current) and its bias."""
        from .weights import current

        head = self.adapter.unembed_module
        assert isinstance(head, torch.nn.Linear), "the callers project through a plain linear head only"
        name = self._head_name()  # None when tied to (and listed as) the embedding, which edits never change
        return (current(self.lm.model, name) if name else head.weight.detach()), head.bias

    def _head_name(self) -> str | None:
        """The parameter name of the LM head's weight, or None when it is tied to another listed parameter."""
        if not hasattr(self, "_head"):
            head = self.adapter.unembed_module
            module = next(n for n, m in self.lm.model.named_modules() if m is head)
            names = {n for n, _ in self.lm.model.named_parameters()}
            self._head: str | None = module + ".weight" if module + ".weight" in names else None
        return self._head


def _within(expected: torch.Tensor, got: torch.Tensor, tolerance: float, what: str) -> None:
    """An EditkitError naming `what` when max |got - expected| exceeds `tolerance` x max |expected|."""
    error = float((got - expected).abs().max()) / max(float(expected.abs().max()), 1e-12)
    if not error <= tolerance:
        raise EditkitError(f"editkit's adapter does not fit this model: {what} (relative error {error:.2g}); "
                           "its architecture needs a Family of its own in editkit/model/adapters.py")


def _at_least_f32(z: torch.Tensor) -> torch.Tensor:
    """float32 logits, or float64 ones for a float64 model (finite-difference checks need them)."""
    return z if z.dtype == torch.float64 else z.float()


def _raise_stop(h: torch.Tensor) -> torch.Tensor:
    raise Stop


def _stop_when(done: bool) -> None:
    if done:
        raise Stop


class Reading(dict[str, torch.Tensor]):
    """Site name -> tensor read by Runner.read; `hidden` is the final-normed state when the run went to the end, and
    `kv` / `calls` what forward's keep_kv / calls asked for (None otherwise)."""

    def __init__(self, values: dict[str, torch.Tensor], hidden: torch.Tensor | None = None,
                 kv: KV | None = None, calls: BlockCalls | None = None) -> None:
        super().__init__(values)
        self.hidden, self.kv, self.calls = hidden, kv, calls


class Generated(list[str]):
    """The new text of each row generated by Runner.complete; `ids` holds their token ids (B, n)."""

    def __init__(self, texts: list[str], ids: torch.Tensor) -> None:
        super().__init__(texts)
        self.ids = ids


def _head_product(x: torch.Tensor, W: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x W^T + b, the weight on the left (W x^T) for at most HEAD_BY_ROWS rows without gradients (the same map; a
    logit may differ in its last bit)."""
    rows = x.numel() // max(x.shape[-1], 1)
    if rows > HEAD_BY_ROWS or x.dtype != W.dtype or (torch.is_grad_enabled() and x.requires_grad):
        return torch.nn.functional.linear(x, W, bias)
    flat = x.reshape(-1, x.shape[-1])
    z = torch.mm(W, flat.T).T
    if bias is not None:
        z = z + bias.to(z.dtype)
    return z.contiguous().reshape(*x.shape[:-1], W.shape[0])


def vocab_pass(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None = None, cap: float | None = None,
               ids: torch.Tensor | None = None, mean: bool = False, block: int = VOCAB_BLOCK,
               argmax: bool = True) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None,
                                             torch.Tensor | None]:
    """One pass over the unembedding rows w_v (V, d) for all rows x_i (N, d), with logits z = W x + b (and Gemma 2's
    softcap cap * tanh(z / cap)): a running maximum and a float64 sum of exponentials (the online logsumexp), so each
    block of W is read from memory once for all rows; no (N, V) matrix is ever held. Returns (lse (N,) float64, z at
    `ids` (N,) float64 or None, E_softmax(z)[w] (N, d) when `mean` (no softcap) else None, argmax (N,) or None
    without `argmax`). Where no gradient is asked for, each block's logits go into one reused buffer and are
    exponentiated in place."""
    n = x.shape[0]
    m = torch.full((n,), -float("inf"), dtype=torch.float64, device=x.device)
    total = torch.zeros(n, dtype=torch.float64, device=x.device)
    answer = torch.zeros(n, dtype=torch.float64, device=x.device) if ids is not None else None
    acc = torch.zeros(n, W.shape[1], dtype=x.dtype, device=x.device) if mean else None
    best = torch.zeros(n, dtype=torch.long, device=x.device) if argmax else None
    grad = torch.is_grad_enabled() and (x.requires_grad or W.requires_grad)  # attribution patching's backward
    buf = None if grad or x.dtype not in (torch.float32, torch.float64) else \
        torch.empty(n * min(block, W.shape[0]), dtype=x.dtype, device=x.device)
    for j in range(0, W.shape[0], block):
        Wj = W[j:j + block].to(x.dtype)  # a half-precision head meets float32 states block by block
        bj = None if b is None else b[j:j + block].to(x.dtype)
        z = _at_least_f32(torch.nn.functional.linear(x, Wj, bj)) if buf is None else _logits_into(x, Wj, bj, buf)
        if cap:
            z = torch.tanh(z / cap) * cap if grad else z.div_(cap).tanh_().mul_(cap)
        top, where = z.max(1) if argmax else (z.amax(1), None)  # max(1) with its indices: ~16x amax's time
        if ids is not None:  # read before z is overwritten by its exponentials
            inside = ((ids >= j) & (ids < j + z.shape[1])).nonzero()[:, 0]
            if len(inside) and answer is not None:
                answer[inside] = z[inside, ids[inside] - j].double()
        new = torch.maximum(m, top.double())
        keep = torch.exp(m - new)  # rescales what was summed under the old maximum (0 on the first block)
        shift = new[:, None].to(z.dtype)
        e = torch.exp(z - shift) if grad else z.sub_(shift).exp_()  # in place: the block's logits written once
        total = total * keep + _sum64(e)
        if acc is not None:
            acc = acc * keep[:, None].to(acc.dtype) + e.to(acc.dtype) @ Wj
        if best is not None and where is not None:
            best = torch.where(top.double() > m, where + j, best)
        m = new
    mean_w = acc / total[:, None].to(acc.dtype) if acc is not None else None
    return m + torch.log(total), answer, mean_w, best


def _logits_into(x: torch.Tensor, Wj: torch.Tensor, bj: torch.Tensor | None, buf: torch.Tensor) -> torch.Tensor:
    """x Wj^T (+ bj) as linear computes it (mm / addmm), written into the reused flat `buf`: a fresh (N x block)
    output per block costs its page faults (25 MB at 1,540 rows; ~15% of the pass measured on Gemma's head)."""
    z = buf[:x.shape[0] * Wj.shape[0]].view(x.shape[0], Wj.shape[0])
    return torch.mm(x, Wj.t(), out=z) if bj is None else torch.addmm(bj, x, Wj.t(), out=z)


def _sum64(e: torch.Tensor) -> torch.Tensor:
    """Row sums in float64, a few columns at a time: sum(dtype=float64) converts its whole input first, and a
    block of 1,540 rows is a 50 MB float64 copy (the same sums up to float64 rounding, ~1e-16)."""
    if e.dtype == torch.float64:
        return e.sum(1)
    total = e[:, :SUM_COLUMNS].sum(1, dtype=torch.float64)
    for i in range(SUM_COLUMNS, e.shape[1], SUM_COLUMNS):
        total = total + e[:, i:i + SUM_COLUMNS].sum(1, dtype=torch.float64)
    return total


def vocab_pass_bf16(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor | None, cap: float | None,
                    ids: torch.Tensor, block: int = VOCAB_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """(lse, z at `ids`) as vocab_pass, with the logits from bfloat16 matmuls (an approximation; bf16 matmuls run at
    2.2-2.5x the float32 rate on this CPU). The answer's own logit z_a is a float32 dot product; every other logit is
    computed as z - c inside the matmul's float32 accumulator (x gets a column -c, W a column of ones), with c a
    bf16 number next to z_a, so the bf16 rounding of the output is relative to z - c, small for the tokens that
    hold the probability mass, instead of to z (a logit of 30 rounds to +-0.06 in bf16)."""
    z_a = (x * W[ids].to(x.dtype)).sum(-1)
    c = z_a.to(torch.bfloat16).to(x.dtype)  # exactly representable: -c enters the bf16 matmul unrounded
    xe = torch.cat([x, -c[:, None]], 1).to(torch.bfloat16)
    n = x.shape[0]
    m = torch.full((n,), -float("inf"), dtype=torch.float64, device=x.device)
    total = torch.zeros(n, dtype=torch.float64, device=x.device)
    for j in range(0, W.shape[0], block):
        Wj = W[j:j + block]
        We = torch.cat([Wj.to(torch.bfloat16), torch.ones(Wj.shape[0], 1, dtype=torch.bfloat16, device=x.device)], 1)
        # in place from here: the (rows x block) logits are written once, not once per operation
        z = torch.nn.functional.linear(xe, We).float().add_(c[:, None])
        if b is not None:
            z.add_(b[j:j + block].float())
        if cap:
            z.div_(cap).tanh_().mul_(cap)
        new = torch.maximum(m, z.amax(1).double())  # amax: max(1) also finds the argmax, unused here
        e = z.sub_(new[:, None].float()).exp_()
        total = total * torch.exp(m - new) + _sum64(e)
        m = new
    answer = z_a + (b[ids].to(x.dtype) if b is not None else 0)
    if cap:
        answer = torch.tanh(answer / cap) * cap
    return m + torch.log(total), answer.double()


class _LogSumExp(torch.autograd.Function):
    """lse(W x + b) with its gradient d lse / dx = E_p[w] taken from the same forward pass (no second read of W)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, W: torch.Tensor,
                b: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        lse, _, mean_w, best = vocab_pass(x.detach(), W.detach(), None if b is None else b.detach(), mean=True)
        lse = lse.to(x.dtype)
        ctx.save_for_backward(mean_w)
        ctx.mark_non_differentiable(mean_w, best)
        return lse, mean_w, best

    @staticmethod
    def backward(ctx: Any, g_lse: torch.Tensor, g_mean: Any,
                 g_best: Any) -> tuple[torch.Tensor, None, None]:
        (mean_w,) = ctx.saved_tensors
        return g_lse[:, None] * mean_w, None, None


def vocab_logsumexp(lm: LM, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """For final-normed states x (N, d): (lse (N,), E_p[w] (N, d), argmax (N,)) of the logits W x + b, without
    ever holding the (N, V) logits: log p(t | x) = w_t . x + b_t - lse, and KL terms follow from these
    (editing/targets.py). The gradient flows through lse. None when the model's unembedding is not a plain linear
    map or has a softcap (then use `logits`)."""
    a = lm.adapter
    head = a.unembed_module
    if a.final_softcap or not isinstance(head, torch.nn.Linear):
        return None
    W, bias = lm.runner._head_weight()
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    out = _LogSumExp.apply(x, W, bias)  # type: ignore[no-untyped-call]
    return out
