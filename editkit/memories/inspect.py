"""The FFN memories active at one token position (Geva et al. 2021, §2; lm-debugger's prediction view).

For layer l the FFN computes FFN(x) = sum_i m_i v_i + b with m = f(x K^T) (Geva Eq. 2): m is captured as the input
of `adapter.down_proj(l)`, v_i is column i of W_out = `adapter.down_weight(l)`. A memory's contribution to the
update is |m_i| * ||v_i|| (the norm of the sub-update m_i v_i), and memories are labelled `L{l}.M{i}`.

Residual before and after the FFN at layer l (the logit lens reads both through the final norm and unembedding):
- sequential blocks (GPT-2, Llama, NeoX without parallel residual): before = the residual entering the MLP's norm
  (block input + attention update); after = the block output (before + FFN output);
- Gemma 2/3: same, where the FFN output passes post_feedforward_layernorm before it is added, so
  after = before + post_mlp_norm(FFN(x)) = the block output;
- value tokens: top tokens of W_U v_i (runner.logits); for Gemma v_i is first scaled by the post-MLP norm's 1 + w
  (`value_vectors`), the direction memory i actually adds to the residual; the contribution stays |m_i| ||v_i||;
- parallel blocks (GPT-J, NeoX): attention and MLP both read the block input x, so before = x and
  after = x + FFN(ln(x)) (the attention term is left out; the block output is x + attn + FFN).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from ..core.errors import EditkitError
from ..core.results import JsonObject, Result, frame
from ..figures.memories import contributions_figure
from ..model.sites import layers
from ..model.tokens import check_prompt, encode, token_strings
from ..model.weights import effective_weight
from . import vocab


def label(layer: int, index: int) -> str:
    return f"L{layer}.M{index}"


def check_layer(lm, layer: int) -> int:
    n = lm.adapter.n_layers
    if not isinstance(layer, int) or not -n <= layer < n:
        raise EditkitError(f"layer {layer} is out of range: the model has layers 0..{n - 1}")
    return layer % n


def check_memory(lm, index: int) -> int:
    d_ff = lm.adapter.d_ff
    if not isinstance(index, int) or not 0 <= index < d_ff:
        raise EditkitError(f"memory {index} is out of range: each layer has memories 0..{d_ff - 1}")
    return index


def resolve_position(n_tokens: int, position: int) -> int:
    if not -n_tokens <= position < n_tokens:
        raise EditkitError(f"position {position} is out of range: the prompt has {n_tokens} tokens "
                           f"(0..{n_tokens - 1}, or -1 for the last)")
    return position % n_tokens


def top_tokens(lm, logits: torch.Tensor, k: int) -> list[dict]:
    probs = torch.softmax(logits.float(), -1)
    p, i = probs.topk(min(k, probs.numel()))
    return [{"token": lm.tok.decode([int(t)]), "token_id": int(t), "prob": float(q), "logit": float(logits[t])}
            for q, t in zip(p, i)]


@dataclass
class Memory:
    layer: int
    index: int
    label: str
    coefficient: float  # m_i
    value_norm: float  # ||v_i||
    contribution: float  # |m_i| * ||v_i||
    value_tokens: list[dict]  # top tokens of W_U v_i, each with its class (memories/vocab.py)
    filtered_tokens: list[dict] = field(default_factory=list)  # top tokens of a class, with their full ranks


@dataclass
class LayerLens:
    layer: int
    before: list[dict]  # top tokens of the residual before the FFN
    after: list[dict]  # ... after the FFN update is added


@dataclass
class MemoryView(Result):
    """The FFN memories of one layer at one token (module docstring): the top memories by contribution, and the
    logit lens of the residual before and after every layer's FFN at that token."""

    model: str
    prompt: str
    tokens: list[str]
    position: int  # absolute index into tokens
    layer: int
    norm: bool  # final norm applied before projecting values
    memories: list[Memory]
    lens: list[LayerLens]
    n_active: int  # memories with m_i > 0
    coefficient_max: float
    coefficient_min: float
    definition: str = field(default="")

    def headline(self) -> str:
        top = self.memories[0] if self.memories else None
        return (f"layer {self.layer} at {self.tokens[self.position]!r}: {self.n_active} memories with m_i > 0"
                + (f"; the largest, {top.label}, promotes {top.value_tokens[0]['token']!r}" if top else ""))

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def _from_json(cls, d: dict) -> "MemoryView":
        return cls(**{**d, "memories": [Memory(**m) for m in d["memories"]],
                      "lens": [LayerLens(**r) for r in d["lens"]]})

    def to_frame(self):
        """One row per memory: label, m_i, ||v_i||, contribution and its top value tokens."""
        return frame([{"memory": m.label, "coefficient": m.coefficient, "value_norm": m.value_norm,
                       "contribution": m.contribution, "value_tokens": [t["token"] for t in m.value_tokens]}
                      for m in self.memories])

    def figure(self):
        """The memories' contributions |m_i| ||v_i|| as bars, largest on top (green m_i > 0, red m_i < 0)."""
        return contributions_figure(self.to_json()["memories"])


RESIDUAL_DEFINITION = {
    False: "before = residual entering the MLP norm; after = block output (for Gemma the FFN output passes "
           "post_feedforward_layernorm before it is added)",
    True: "parallel block: before = block input x; after = x + FFN(ln(x)) (attention term left out)",
}


@torch.no_grad()
def capture_ffn(lm, prompt: str) -> dict:
    """One forward pass; per layer the down-projection input m and output, and the residual before/after the FFN
    (see module docstring), all for the first (only) prompt: tensors (layers, tokens, width)."""
    a = lm.adapter
    L = a.n_layers
    got = lm.runner.read([s for kind in ("mlp_key", "mlp_out", "resid_mid", "resid_post") for s in layers(kind, L)],
                         **encode(lm, prompt))
    stack = lambda kind: torch.stack([got[f"{kind}.{l}"][0] for l in range(L)])  # noqa: E731
    before = stack("resid_mid")  # parallel blocks: the block input
    after = before + stack("mlp_out") if a.family.parallel else stack("resid_post")
    return {"m": stack("mlp_key"), "out": stack("mlp_out"), "before": before, "after": after}


def value_vectors(lm, layer: int, indices) -> torch.Tensor:
    """The values v_i (n, d_model) as directions in the residual stream. Without a post-MLP norm that is column i
    of W_out. Gemma adds post_feedforward_layernorm(o) = s * o / rms(o) with s = 1 + w (the adapter's norm_scale):
    the 1/rms(o) factor is positive and shared by all memories at a position, so memory i moves the residual along
    s * v_i; that channel-scaled vector is what gets projected to the vocabulary."""
    V = effective_weight(lm, "down_proj", layer)[:, list(indices)].T  # with this context's edits
    norm = lm.adapter.post_mlp_norm(layer)
    if norm is not None:
        V = V * lm.adapter.norm_scale(norm)[0]
    return V


@torch.no_grad()
def value_logits(lm, layer: int, indices: list[int], norm: bool = False) -> torch.Tensor:
    """W_U v_i for each memory (norm: final norm first; Gemma: v_i scaled by its post-MLP norm)."""
    return lm.runner.logits(value_vectors(lm, layer, indices), norm=norm)


@torch.no_grad()
def value_tokens(lm, layer: int, indices: list[int], k: int = 5, norm: bool = False) -> list[list[dict]]:
    """Top tokens of each value vector projected to the vocabulary, each with its class ("latin", "other
    script", "fragment", ...: memories/vocab.py)."""
    if not indices:
        return []
    v = vocab.vocab(lm)
    rows = [top_tokens(lm, row, k) for row in value_logits(lm, layer, indices, norm)]
    return [[{**t, "class": v.classes[t["token_id"]]} for t in row] for row in rows]


@torch.no_grad()
def memories_at(lm, prompt: str, layer: int, position: int = -1, top: int = 10, norm: bool = False,
                k_tokens: int = 5, lens_k: int = 5, token_filter: str = "all") -> MemoryView:
    """The `top` memories of `layer` at `position` by contribution |m_i| ||v_i||, with their value tokens, and the
    logit lens of the residual before/after the FFN at every layer (at the same position).
    `token_filter="latin"` adds, per memory, its top Latin-script words with their ranks in the full vocabulary
    (the raw top tokens stay)."""
    if token_filter not in vocab.FILTERS:
        raise EditkitError(f"token_filter must be one of {', '.join(vocab.FILTERS)}, not {token_filter!r}")
    check_prompt(lm, prompt)
    layer = check_layer(lm, layer)
    if top < 1:
        raise EditkitError("top must be at least 1")
    tokens = token_strings(lm, prompt)
    pos = resolve_position(len(tokens), position)
    a = lm.adapter
    cap = capture_ffn(lm, prompt)
    m = cap["m"][layer, pos].float()  # (d_ff,)
    v_norm = effective_weight(lm, "down_proj", layer).float().norm(dim=0)  # ||v_i||
    contribution = m.abs() * v_norm
    c, idx = contribution.topk(min(top, contribution.numel()))
    idx = [int(i) for i in idx]
    vt = value_tokens(lm, layer, idx, k_tokens, norm)
    classes = vocab.FILTERS[token_filter]
    ft = [vocab.filtered_top(lm, row, k_tokens, classes) for row in value_logits(lm, layer, idx, norm)] \
        if classes else [[] for _ in idx]
    memories = [Memory(layer, i, label(layer, i), float(m[i]), float(v_norm[i]), float(ci), toks, f)
                for i, ci, toks, f in zip(idx, c, vt, ft)]
    L = a.n_layers
    res = torch.cat([cap["before"][:, pos], cap["after"][:, pos]])  # (2L, d)
    logits = lm.runner.logits(res, norm=True)
    lens = [LayerLens(l, top_tokens(lm, logits[l], lens_k), top_tokens(lm, logits[L + l], lens_k))
            for l in range(L)]
    return MemoryView(lm.name, prompt, tokens, pos, layer, norm, memories, lens, int((m > 0).sum()),
                      float(m.max()), float(m.min()), RESIDUAL_DEFINITION[a.family.parallel])
