"""MHSA vs FFN similarity curves (PMET, Li et al. 2023, Sec. 3 and Fig. 2; the upstream notebook is
xpq-tech/PMET knowledge-prob/prob_gptJ.ipynb).

For each fact prompt, at its LAST real token and every layer l, compare the state entering a component with the
state leaving it:
- cosine similarity  cos(x, y) = x·y / (|x| |y|);
- Jaccard similarity of their top-k vocabulary tokens (PMET Eq. 7, k = 50):  J = |T(x) ∩ T(y)| / |T(x) ∪ T(y)|,
  with T(h) = top-k ids of the logit lens  W_U · final_norm(h)  (`runner.logits(h, norm=True)`; the paper only
  says "mapping to vocabulary": with its Eq. 1 this is the natural reading).

Which states (mode="residual", the default; PMET compares "the hidden states before and after" each component,
so both sides are residual-stream states that the logit lens can read):
- sequential blocks (GPT-2, Llama, Gemma, NeoX without parallel residual), with h_{l-1} the block input:
    MHSA: input h_{l-1},               output h_mid = h_{l-1} + a_l
    FFN : input h_mid,                 output h_l   = h_mid + m_l        (the block output)
- parallel blocks (GPT-J, NeoX with use_parallel_residual): both components read h_{l-1}:
    MHSA: input h_{l-1},               output h_{l-1} + a_l
    FFN : input h_{l-1},               output h_{l-1} + m_l
  where a_l / m_l are the terms the block adds to the residual stream: the attention / MLP module outputs, and for
  Gemma 2/3 those outputs after post_attention_layernorm / post_feedforward_layernorm.

mode="raw" compares a component's input with its raw output vector, cos(x, f(x)), like the upstream notebook
(xpq-tech/PMET knowledge-prob/prob_gptJ.ipynb, which compares the module output with ln_1's output):
    MHSA: x = h_{l-1}, f(x) = a_l;   FFN: x = h_mid (sequential) or h_{l-1} (parallel), f(x) = m_l.
Here x is the residual the component reads (before its input norm), not the normed vector itself.

The 95% band per layer is the normal-approximation interval mean ± 1.96 · s / sqrt(n) (s = sample standard
deviation over the n prompts), clipped to the metric's range ([-1, 1] for cosine, [0, 1] for Jaccard).
Results are cached on disk per (model, facts, n, mode, prompts) (editkit/core/cache.py, store "similarity").

Each batch of prompts is one work item (`batch_values`, editkit/runtime/cluster.py): in process they run one after the
other; on Ray (`backend`) the workers compute batches in parallel. A batch's values are cached on their own
(store "similarity/batches", keyed by the weights, mode, k and the batch's prompts), so an interrupted run, here or
on any worker, resumes from the finished batches; the batches are the serial run's, so the values are equal.
"""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import asdict, dataclass, field

import torch

from .core.cache import Store, read_json
from .core.errors import EditkitError
from .core.results import JsonObject, Result, frame
from .figures.similarity import similarity_figure
from .model.ram import step_bytes, with_margin
from .model.sites import layers
from .model.tokens import encode
from .model.weights import model_key
from .runtime.cluster import Backend, Item, run_items

TOP_K = 50  # PMET Fig. 2 uses the top-50 tokens
DEFAULT_N = 200
Z95 = 1.96
MODES = ("residual", "raw")
FACT_SETS = ("known", "all")  # known = ROME facts the model predicts; all = all ROME known facts
CACHE_VERSION = 1
BATCH_VERSION = 1
METRICS = ("mhsa_cos", "ffn_cos", "mhsa_jaccard", "ffn_jaccard")


def jaccard(a, b) -> float:
    """|A ∩ B| / |A ∪ B| of two collections of token ids (PMET Eq. 7); two empty sets count as identical (1)."""
    a, b = set(a), set(b)
    union = a | b
    return len(a & b) / len(union) if union else 1.0


def definition(adapter, mode: str = "residual") -> str:
    """The input/output definition used for this model's block type, in words (shown on the page, stored)."""
    post = (" a_l and m_l are the attention/MLP outputs after post_attention_layernorm / post_feedforward_layernorm "
            "(what the block adds)." if adapter.family.post_attn_norm else
            " a_l and m_l are the attention/MLP module outputs (what the block adds).")
    if mode == "raw":
        ffn_in = "h_{l-1}" if adapter.family.parallel else "h_mid = h_{l-1} + a_l"
        return (f"raw component output vs its input, cos(x, f(x)): MHSA x = h_{{l-1}}, f(x) = a_l; "
                f"FFN x = {ffn_in}, f(x) = m_l; last token, h_{{l-1}} = input of block l." + post)
    if adapter.family.parallel:
        return ("parallel block (both read h_{l-1}): MHSA input h_{l-1}, output h_{l-1} + a_l; "
                "FFN input h_{l-1}, output h_{l-1} + m_l; last token, h_{l-1} = input of block l." + post)
    return ("sequential block: MHSA input h_{l-1}, output h_mid = h_{l-1} + a_l; FFN input h_mid, "
            "output h_l = h_mid + m_l (block output); last token, h_{l-1} = input of block l." + post)



def _spans(layers: list[int]) -> str:
    """'1-5, 8, 10-11': sorted layer numbers with their runs joined."""
    runs: list[list[int]] = []
    for n in sorted(layers):
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)

@dataclass
class SimilarityResult(Result):
    """PMET's Fig. 2 for one model (module docstring): per layer, the mean cosine and top-k Jaccard similarity of
    the states entering and leaving the attention (mhsa_) and the FFN (ffn_) over `n` prompts, each
    {"mean", "low", "high"} with its 95% band."""

    model: str
    family: str
    parallel: bool
    mode: str
    facts: str
    n: int
    k: int
    definition: str
    interval: str
    layers: list[int]
    mhsa_cos: dict  # {"mean": [...], "low": [...], "high": [...]} per layer
    ffn_cos: dict
    mhsa_jaccard: dict
    ffn_jaccard: dict
    seconds: float = 0.0
    prompts_sha1: str = ""
    cached: bool = False
    prompts: list[str] = field(default_factory=list)

    def headline(self) -> str:
        mean = lambda band: sum(band["mean"]) / len(band["mean"])  # noqa: E731
        return (f"{self.model}, {self.n} prompts ({self.facts}), mode {self.mode}: mean cosine MHSA "
                f"{mean(self.mhsa_cos):.3f}, FFN {mean(self.ffn_cos):.3f}")

    def conclusion(self, metric: str = "cos") -> str:
        """One sentence: at which layers the attention or the FFN changes the state more (its similarity lower, the
        two 95% bands apart), where the two are within noise (bands overlapping), and the largest gap."""
        a, f = getattr(self, f"mhsa_{metric}"), getattr(self, f"ffn_{metric}")
        idx = range(len(self.layers))
        mhsa = [i for i in idx if a["high"][i] < f["low"][i]]
        ffn = [i for i in idx if f["high"][i] < a["low"][i]]
        same = [i for i in idx if i not in mhsa and i not in ffn]
        gap = max(idx, key=lambda i: abs(a["mean"][i] - f["mean"][i]))
        name = "cosine" if metric == "cos" else f"top-{self.k} Jaccard"
        part = lambda what, xs: f"{what} at {len(xs)} layer{'s' if len(xs) > 1 else ''} " \
            f"({_spans([self.layers[i] + 1 for i in xs])})"  # noqa: E731
        parts = [part(w, xs) for w, xs in (("the attention changes the state more", mhsa),
                                           ("the FFN", ffn), ("the two are within noise", same)) if xs]
        return (f"By {name} similarity (lower: the sub-layer changes the state more; within noise: 95% bands "
                f"overlap), " + ", ".join(parts) + f" of {len(self.layers)}; the largest gap is at layer "
                f"{self.layers[gap] + 1}: attention {a['mean'][gap]:.2f} against FFN {f['mean'][gap]:.2f}.")

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def _from_json(cls, d: dict) -> "SimilarityResult":
        return cls(**d)

    def to_frame(self):
        """One row per layer: each metric's mean and 95% band."""
        return frame([{"layer": l, **{f"{m}_{what}": getattr(self, m)[what][i] for m in METRICS
                                      for what in ("mean", "low", "high")}} for i, l in enumerate(self.layers)])

    def figure(self, metric: str = "cos"):
        """The MHSA and FFN curves of `metric` ("cos" or "jaccard") with their bands, layers counted from 1."""
        title = "Cosine similarity (input vs output)" if metric == "cos" else \
            f"Top-{self.k} Jaccard similarity (logit lens)"
        return similarity_figure(self.to_json(), metric, title, None if metric == "cos" else [0, 1])


# --- capture ---------------------------------------------------------------------------------------------------
@torch.no_grad()
def capture_states(lm, prompts: list[str]) -> dict[str, torch.Tensor]:
    """Residual states and added terms at each prompt's last real token, every layer: tensors (n, layers, d).

    h_in = input of block l (h_{l-1}), attn = a_l, mlp = m_l (post-norm outputs on Gemma), h_out = block output h_l.
    Prompts are padded on the right, so real tokens never see padding and the last real one is mask.sum - 1.
    """
    a = lm.adapter
    L = a.n_layers
    batch = encode(lm, prompts, pad_side="right")
    rows = torch.arange(len(prompts), device=batch["input_ids"].device)
    last = batch["attention_mask"].sum(1) - 1
    kinds = {"h_in": "resid_pre", "attn": "attn_write", "mlp": "mlp_write", "h_out": "resid_post"}
    got = lm.runner.read([s for kind in kinds.values() for s in layers(kind, L)], **batch)

    def stack(kind):
        return torch.stack([got[f"{kind}.{l}"][rows, last] for l in range(L)], 1).float()

    return {name: stack(kind) for name, kind in kinds.items()}


def component_states(states: dict, parallel: bool, mode: str = "residual") -> dict[str, torch.Tensor]:
    """(mhsa_in, mhsa_out, ffn_in, ffn_out) as defined in the module docstring, each (n, layers, d)."""
    h, a_l, m_l = states["h_in"], states["attn"], states["mlp"]
    if mode not in MODES:
        raise EditkitError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    ffn_in = h if parallel else h + a_l
    if mode == "raw":
        return {"mhsa_in": h, "mhsa_out": a_l, "ffn_in": ffn_in, "ffn_out": m_l}
    ffn_out = h + m_l if parallel else states["h_out"]  # h_l = h_mid + m_l (block output, exact)
    return {"mhsa_in": h, "mhsa_out": h + a_l, "ffn_in": ffn_in, "ffn_out": ffn_out}


@torch.no_grad()
def top_ids(lm, h: torch.Tensor, k: int = TOP_K, chunk: int = 128) -> torch.Tensor:
    """Top-k token ids of the logit lens of each vector in h (..., d) -> (..., k)."""
    flat = h.reshape(-1, h.shape[-1])
    dtype = next(lm.model.parameters()).dtype
    out = [lm.runner.logits(flat[i:i + chunk].to(dtype)).topk(k, dim=-1).indices.cpu()
           for i in range(0, flat.shape[0], chunk)]
    return torch.cat(out).reshape(*h.shape[:-1], k)


def _jaccard_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Jaccard of the id sets along the last axis (ids within a row are distinct, as topk gives)."""
    inter = (a.unsqueeze(-1) == b.unsqueeze(-2)).any(-1).sum(-1).float()
    k = a.shape[-1]
    return inter / (2 * k - inter)


def per_prompt(lm, prompts: list[str], mode: str = "residual", k: int = TOP_K) -> dict[str, torch.Tensor]:
    """Per-prompt, per-layer values (n, layers) of the four metrics for one batch of prompts."""
    s = component_states(capture_states(lm, prompts), lm.adapter.family.parallel, mode)
    cos = torch.nn.functional.cosine_similarity
    out = {"mhsa_cos": cos(s["mhsa_in"], s["mhsa_out"], dim=-1), "ffn_cos": cos(s["ffn_in"], s["ffn_out"], dim=-1)}
    ids: dict[int, torch.Tensor] = {}  # by tensor identity: ffn_in is mhsa_out (sequential) or mhsa_in (parallel)
    h_in, h_out = s["mhsa_in"], s["ffn_out"]
    if h_out.shape[1] > 1 and torch.equal(h_out[:, :-1], h_in[:, 1:]):  # h_l is the input of block l + 1
        ids[id(h_in)] = top_ids(lm, h_in, k)
        ids[id(h_out)] = torch.cat([ids[id(h_in)][:, 1:], top_ids(lm, h_out[:, -1:], k)], 1)
    for name in ("mhsa_in", "mhsa_out", "ffn_in", "ffn_out"):
        t = s[name]
        if id(t) not in ids:
            ids[id(t)] = top_ids(lm, t, k)
    for comp in ("mhsa", "ffn"):
        out[f"{comp}_jaccard"] = _jaccard_rows(ids[id(s[f"{comp}_in"])], ids[id(s[f"{comp}_out"])])
    return {name: v.cpu() for name, v in out.items()}


def band(values: torch.Tensor, lo: float, hi: float) -> dict:
    """Per-layer mean and 95% normal interval mean ± 1.96·s/sqrt(n) of values (n, layers), clipped to [lo, hi]."""
    n = values.shape[0]
    mean = values.mean(0).double()
    half = Z95 * values.double().std(0, unbiased=True) / math.sqrt(n) if n > 1 else torch.zeros_like(mean)
    return {"mean": [round(float(x), 6) for x in mean],
            "low": [round(max(lo, float(x)), 6) for x in mean - half],
            "high": [round(min(hi, float(x)), 6) for x in mean + half]}


# --- the analysis, cached --------------------------------------------------------------------------------------
def fact_prompts(lm, facts: str = "known", n: int = DEFAULT_N) -> list[str]:
    from .data.facts import known_facts, predicted_facts

    if facts == "known":
        rows = predicted_facts(lm, n)
        if not rows:
            raise EditkitError(f"{lm.name} predicts none of the ROME known facts; pass prompts explicitly "
                               "or use --facts all")
    elif facts == "all":
        rows = list(known_facts())[:n]
    else:
        raise EditkitError(f"facts must be one of {', '.join(FACT_SETS)}, not {facts!r}")
    return [r["prompt"] for r in rows]


STORE = Store("similarity", version=CACHE_VERSION)
BATCHES = Store("similarity/batches", version=BATCH_VERSION)


def batch_values(lm, prompts: list[str], mode: str, k: int, cache: bool = True) -> dict[str, list]:
    """per_prompt for one batch as lists (n, layers) per metric, through the batch cache (cache=False: neither
    read nor written). float32 values survive the JSON round trip exactly."""
    digest = hashlib.sha1("\n".join(prompts).encode("utf-8")).hexdigest()
    path = BATCHES.path(model_key(lm), mode=mode, k=k, prompts=digest)
    done = BATCHES.get(path) if cache else None
    if done is not None and set(done) == set(METRICS):
        return done
    values = {m: v.tolist() for m, v in per_prompt(lm, prompts, mode, k).items()}
    if cache:
        BATCHES.put(path, values)
    return values


def cache_path(model: str, facts: str, n: int, mode: str, prompts: list[str], k: int = TOP_K):
    digest = hashlib.sha1("\n".join(prompts).encode("utf-8")).hexdigest()
    return STORE.path(model, facts=facts, n=n, k=k, mode=mode, prompts=digest), digest


def similarity(lm, n: int = DEFAULT_N, facts: str = "known", prompts: list[str] | None = None,
               mode: str = "residual", k: int = TOP_K, batch_size: int = 16, cache: bool = True,
               progress=None, backend: Backend | None = None) -> SimilarityResult:
    """PMET Fig. 2 curves for `lm` over n prompts (default: the first n known facts the model predicts).

    `prompts` overrides the fact set (facts is then reported as "custom"). `progress(fraction, message)` is called
    after each batch. Cached on disk; a cached result comes back with cached=True, and cache=False neither reads nor
    writes the cache. `backend`: where the batches are computed (in process by default).
    """
    if mode not in MODES:
        raise EditkitError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if not 1 <= k <= lm.adapter.vocab_size:
        raise EditkitError(f"k must be between 1 and the vocabulary size ({lm.adapter.vocab_size})")
    if prompts is not None:
        prompts = [p for p in prompts]
        if not prompts or any(not isinstance(p, str) or not p.strip() for p in prompts):
            raise EditkitError("prompts must be a non-empty list of non-empty strings")
        facts = "custom"
        prompts = prompts[:n] if n else prompts
    else:
        if n is None or n < 1:
            raise EditkitError("n must be at least 1")
        prompts = fact_prompts(lm, facts, n)
    n = len(prompts)
    path, digest = cache_path(model_key(lm), facts, n, mode, prompts, k)
    result = STORE.get(path, lambda p: SimilarityResult.from_json(read_json(p))) if cache else None
    if result is not None:
        result.cached = True
        if progress:
            progress(1.0, "from the cache")
        return result
    t0 = time.perf_counter()
    batches = [prompts[start:start + batch_size] for start in range(0, n, batch_size)]
    items = [Item(batch_values, (batch, mode, k, cache), label=f"prompts {start + 1}-{start + len(batch)} of {n}")
             for start, batch in zip(range(0, n, batch_size), batches)]
    parts = run_items(lm, items, backend, progress)
    values = {m: torch.tensor([row for part in parts for row in part[m]], dtype=torch.float32) for m in METRICS}
    a = lm.adapter
    result = SimilarityResult(
        model=lm.name, family=a.family.name, parallel=a.family.parallel, mode=mode, facts=facts, n=n, k=k,
        definition=definition(a, mode),
        interval="95% normal interval: mean ± 1.96·s/sqrt(n) over prompts, clipped to the metric's range",
        layers=list(range(a.n_layers)),
        mhsa_cos=band(values["mhsa_cos"], -1, 1), ffn_cos=band(values["ffn_cos"], -1, 1),
        mhsa_jaccard=band(values["mhsa_jaccard"], 0, 1), ffn_jaccard=band(values["ffn_jaccard"], 0, 1),
        seconds=round(time.perf_counter() - t0, 2), prompts_sha1=digest, prompts=prompts,
    )
    if cache:
        STORE.put(path, result.to_json())
    return result


def similarity_ram(lm, tokens: int = 32) -> int:
    """Bytes the similarity curves need beyond the weights: one fact of up to `tokens` tokens at a time, with every
    layer's sub-layer inputs and outputs kept (four d_model vectors per layer and position) and one block step."""
    return with_margin(tokens * lm.adapter.n_layers * lm.adapter.d_model * 4 * 4 + step_bytes(lm, tokens))
