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
- `KV` (kv.py) is an immutable snapshot of a run's keys and values. Every run that continues from it gets a
  fresh HF cache holding a copy (`KV.cache()`), so nothing ever has to be rewound: the snapshot is the rewind
  point.
- `run_blocks` calls the model's own decoder blocks from a layer on, with the recorded calls and a KV prefix; patches
  and reads go through Hooks (editkit/model/hooks.py) as for a full forward.
- `step` runs ONE block on its own, attending to per-row keys/values of that layer only (each row may continue a
  different earlier run): a caller can then step many partial runs layer by layer, adding rows as they start.
- `logits` is the one projection to the vocabulary (final norm, LM head with the weight this context sees, softcap);
  `answer_logprob` walks the vocabulary in blocks for all rows at once with an online logsumexp (vocab.py's
  `vocab_pass`: one read of the unembedding matrix in all, no (N, V) matrix).
- `complete` continues prompts (greedy, or top-k sampled from a private seeded stream: decoding.py), with the same
  `edit(hooks)` as `read` for an intervention that must act during the generation; a generation of a few prompts
  computes the LM head with the weight on the left (`_head_by_rows`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..core.errors import EditkitError
from .decoding import Decoding, SeededTopK
from .hooks import Hooks, first_tensor
from .interventions import check_whole
from .kv import KV, cache_layers
from .sites import parse
from .tokens import encode
from .vocab import HEAD_BY_ROWS, VOCAB_BLOCK, at_least_f32, head_product, vocab_pass, vocab_pass_bf16

if TYPE_CHECKING:
    from .lm import LM

# how the model called each block: per layer (the positional args after the hidden state, the kwargs), None
# where a block was not seen
BlockCalls = list[tuple[tuple[Any, ...], dict[str, Any]] | None]
Edit = Callable[[Hooks], None]  # registers overwrites on a run's Hooks (Runner.read's `edit`)

UNEMBED_ROWS = 512  # rows per unembedding chunk: (512 x d) @ (d x V) reads the matrix once per 512 rows


class Stop(Exception):
    """Raised by a hook to end a forward pass once what the caller needs is computed."""


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
            return head_product(x, W.to(x.dtype), bias)

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
            layers = cache_layers(cache, self.adapter.n_layers)
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
            z = head_product(x, W, bias)
        else:
            z = head(x)
        if a.final_softcap:
            z = torch.tanh(z / a.final_softcap) * a.final_softcap
        return at_least_f32(z)

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
                           "its architecture needs a Family of its own in editkit/model/families.py")


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
