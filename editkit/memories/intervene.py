"""Switch FFN memories off or on at one position and compare predictions (lm-debugger's interventions).

A hook on the down-projection's input rewrites chosen coefficients at the intervened position p:
- off: m_i <- 0, which removes the sub-update m_i v_i from the FFN output (Geva Eq. 2: FFN(x) = sum_i m_i v_i);
- on:  m_i <- max_j m_j, the largest coefficient of that layer at position p in the unchanged run (lm-debugger
       uses the max + 0.01); with several memories of one layer switched on they all get that same value;
- keep: m_i <- m_i (an identity, for checks).
During greedy generation the hook acts only on the forward pass that contains position p (the prompt pass with a
KV cache), so the intervention is applied at p exactly once, and later tokens attend to the changed states.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from ..core.errors import EditkitError
from ..core.results import JsonObject, Result, frame
from ..model.decoding import Decoding
from ..model.hooks import Hooks
from ..model.sites import Site
from ..model.tokens import check_prompt, encode, token_strings
from .inspect import check_layer, check_memory, label, resolve_position, top_tokens

MODES = ("off", "on", "keep")


@dataclass
class InterventionResult(Result):
    """Memories switched off or on at one position: their coefficients before and after, the next-token top-k and
    the greedy continuation without and with the change."""

    prompt: str
    position: int
    token: str
    mode: str
    memories: list[dict]  # label, layer, index, old and new coefficient
    before: list[dict]  # next-token top-k without the intervention
    after: list[dict]
    continuation_before: str
    continuation_after: str

    _show = "table"

    def headline(self) -> str:
        return (f"{', '.join(m['label'] for m in self.memories)} switched {self.mode}: "
                f"{self.before[0]['token']!r} -> {self.after[0]['token']!r}")

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def _from_json(cls, d: dict) -> "InterventionResult":
        return cls(**d)

    def to_frame(self):
        """The memories switched, with their coefficients before and after."""
        return frame(self.memories)


def parse_memory(text: str, lm=None) -> tuple[int, int]:
    """'L3.M17' (or '3:17') -> (3, 17); with `lm`, a layer or memory the model does not have is an error."""
    s = text.strip().upper().replace("L", "").replace("M", "").replace(":", ".")
    try:
        layer, index = (int(x) for x in s.split("."))
    except ValueError as exc:
        raise EditkitError(f"memory '{text}' should look like L3.M17") from exc
    if lm is not None:
        layer, index = check_layer(lm, layer), check_memory(lm, index)
    return layer, index


def _plan(lm, memories, mode: str) -> dict[int, list[int]]:
    if mode not in MODES:
        raise EditkitError(f"mode must be one of {MODES}, not {mode!r}")
    per_layer: dict[int, list[int]] = {}
    for layer, index in memories:
        layer = check_layer(lm, int(layer))
        per_layer.setdefault(layer, []).append(check_memory(lm, int(index)))
    return per_layer


def add_hooks(hooks: Hooks, lm, per_layer: dict[int, list[int]], position: int, mode: str, record=None) -> None:
    """Register the coefficient rewrites on each layer's down-projection input (see module docstring)."""
    for layer, idx in per_layer.items():
        def fn(m, idx=idx, layer=layer):
            if m.shape[1] <= position:  # a later generation step (cached prefix): p is not in this pass
                return m
            m = m.clone()
            row = m[:, position]
            if mode == "off":
                new = torch.zeros_like(row[:, idx])
            elif mode == "on":
                new = row.max(-1, keepdim=True).values.expand(-1, len(idx))
            else:
                new = row[:, idx]
            if record is not None and layer not in record:
                record[layer] = (row[0, idx].float().cpu().tolist(), new[0].float().cpu().tolist())
            m[:, position, idx] = new
            return m

        key = Site("mlp_key", layer)
        hooks.set(key.module(lm.adapter), fn, key.direction)


@torch.no_grad()
def intervened_logits(lm, prompt: str, memories, mode: str = "off", position: int = -1) -> torch.Tensor:
    """Full logits (tokens, vocab) of the prompt with the memories rewritten at `position`. For checks (the
    library reads predictions through `intervene`): the tests' identity, keep-mode and empty rewrites leave
    every logit bitwise unchanged."""
    check_prompt(lm, prompt)
    per_layer = _plan(lm, memories, mode)
    pos = resolve_position(len(token_strings(lm, prompt)), position)
    return lm.runner.full_logits(edit=lambda hooks: add_hooks(hooks, lm, per_layer, pos, mode),
                                 **encode(lm, prompt))[0]


@torch.no_grad()
def _run(lm, prompt, per_layer, pos, mode, k, max_new_tokens, record=None):
    """Next-token top-k and a greedy continuation with the rewrites (the first pass fills `record`)."""
    batch = encode(lm, prompt)
    edit = (lambda hooks: add_hooks(hooks, lm, per_layer, pos, mode, record)) if per_layer else None
    h = lm.runner.read({}, full=True, edit=edit, **batch).hidden[0, -1]
    logits = lm.runner.logits(h, norm=False)
    text = lm.runner.complete(batch, Decoding.greedy(max_new_tokens), edit=edit)[0] if max_new_tokens > 0 else ""
    return top_tokens(lm, logits, k), text


def intervene(lm, prompt: str, memories, mode: str = "off", position: int = -1, top: int = 10,
              max_new_tokens: int = 10) -> InterventionResult:
    """Next-token top-`top` and a greedy continuation, without and with the memories [(layer, index)] switched
    `mode` at `position` (default the last token)."""
    check_prompt(lm, prompt)
    per_layer = _plan(lm, memories, mode)
    tokens = token_strings(lm, prompt)
    pos = resolve_position(len(tokens), position)
    before, cont_before = _run(lm, prompt, {}, pos, mode, top, max_new_tokens)
    record: dict = {}
    after, cont_after = _run(lm, prompt, per_layer, pos, mode, top, max_new_tokens, record)
    rows = []
    for layer, idx in per_layer.items():
        old, new = record.get(layer, ([None] * len(idx), [None] * len(idx)))
        rows += [{"label": label(layer, i), "layer": layer, "index": i, "coefficient_before": o,
                  "coefficient_after": n} for i, o, n in zip(idx, old, new)]
    return InterventionResult(prompt, pos, tokens[pos], mode, rows, before, after, cont_before, cont_after)
