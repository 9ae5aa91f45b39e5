"""Second-moment statistics C = E[k k^T] of the down-projection inputs (ROME Eq. 2's C; MEMIT Eq. 14's C_0), or of
the attention output projection's inputs for PMET's MHSA-update ablation.

One streaming pass over the shipped WikiText-2 text collects every requested layer at once (the forward pass stops
after the highest requested layer). Cached per model and layer as safetensors with a JSON provenance record
(model, layer, corpus, token count, dtype); always computed on the base weights (`weights.unedited`), also
inside a session with edits, so the entry under the model's name is the base model's. A token count above the
split's size uses all of it (the provenance records the real count). AlphaEdit's null space of C: nullspace.py.

Estimator (`estimate`, hyperparameter `mom2_shrinkage` = alpha): the methods use
    C_alpha = (1 - alpha) C + alpha diag(C),
shrinkage toward the diagonal (Schaefer & Strimmer 2005, target "D"). C is d x d (Gemma 3 270M: 2048 x 2048) from a
few ten thousand correlated tokens, so its small eigenvalues are underestimated and C^-1 (ROME Eq. 2) blows up
exactly the directions the data barely saw; shrinking keeps every variance and pulls the noisy correlations in.
alpha = 0 is the plain sample second moment (upstream), alpha = 1 treats the features as uncorrelated.

Entity keys (hyperparameter `mom2_entity_weight` = beta): C_beta = (1 - beta) C + beta C_ent, where C_ent is the
second moment of the keys at the WikiText tokens that end a capitalised word (`entity_mask`: a rough proper-noun
detector that skips each sentence's first word). ROME's update preserves
the keys C describes (Eq. 2 minimises the change of W k over them); ordinary text is mostly function words, so
other *subjects* barely weigh in C, and an edit of one subject spills onto similar ones (CounterFact's
neighbourhood prompts). Mixing in keys of named entities asks the update to leave entities in general alone and
to use what is particular to the edited subject. Only WikiText is used: no evaluation set enters C.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import torch

from ..core.cache import Store
from ..core.errors import EditkitError
from ..core.progress import eta
from ..data.corpus import NOTICE, corpus_tokens, token_chunks
from ..model.sites import Site
from ..model.weights import unedited

# the key site of each editable linear map: the FFN down-projection's input (every method), or W_O's (PMET's
# MHSA update)
MODULES = {"down_proj": "mlp_key", "o_proj": "attn_z"}


_SPENT = threading.local()  # seconds this thread spent in statistics passes (first use), for timings without them


def spent() -> float:
    """Seconds this thread has spent computing statistics passes so far (a clock for first-use statistics: a timing
    that subtracts what this grew by during it is the time with the statistics cached)."""
    return getattr(_SPENT, "seconds", 0.0)


def key_width(lm, module: str) -> int:
    """The width of `module`'s input (the size of its C)."""
    return lm.adapter.weight(module, 0).shape[1]


STORE = Store("stats", version=2)  # one safetensors file per entry: C, with its provenance as metadata


POSITIONS = ("all", "entities")


def _path(lm, layer: int, n_tokens: int, module: str = "down_proj", positions: str = "all") -> Path:
    """The cache entry of one layer's statistics; `lm`: the model or its name (what is cached needs no load)."""
    extra = {} if positions == "all" else {"positions": positions}
    return STORE.path(f"layer{layer}", ".safetensors", within=getattr(lm, "name", lm), module=module,
                      corpus="wikitext2-valid", n_tokens=n_tokens, **extra)


def _read(path: Path, d: int) -> tuple[torch.Tensor, dict]:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        C = f.get_tensor("C").clone()  # no mmap left behind
        meta = json.loads(f.metadata()["provenance"])
    if C.shape != (d, d) or not torch.isfinite(C).all():
        raise ValueError("bad shape or values")
    return C, meta


def _load(lm, layer, n_tokens, module="down_proj", positions="all"):
    return STORE.get(_path(lm, layer, n_tokens, module, positions), lambda p: _read(p, key_width(lm, module)))


_SENTENCE_END = (".", "!", "?", ":", ";", '"', "\n")


def entity_mask(tok, ids: list[int]) -> list[bool]:
    """True at the tokens that end a capitalised word ("... the Space Needle is" -> " Space", " Needle"), except a
    sentence's first word, which is capitalised anyway (a proper-noun heuristic, no tagger)."""
    pieces = [tok.decode([i]) for i in ids]
    special = set(getattr(tok, "all_special_ids", []) or [])
    words: list[list[int]] = []  # token indices of each word
    for i, (t, piece) in enumerate(zip(ids, pieces)):
        starts = t in special or not words or piece[:1].isspace() or not piece[:1].isalnum() or \
            not pieces[i - 1][-1:].isalnum()
        if starts:
            words.append([i])
        else:
            words[-1].append(i)
    mask = [False] * len(ids)
    for w, toks in enumerate(words):
        text = "".join(pieces[i] for i in toks).strip()
        if ids[toks[0]] in special or not text[:1].isupper():
            continue
        prev = "".join(pieces[i] for i in words[w - 1]).strip() if w > 0 else ""
        if w == 0 or ids[words[w - 1][0]] in special or prev.endswith(_SENTENCE_END):
            continue  # a sentence's first word: capitalised anyway ("The", "In", "Paris")
        mask[toks[-1]] = True
    return mask


@torch.no_grad()
def second_moment(lm, layers, n_tokens: int = 20000, progress=None, seq_len: int = 128,
                  module: str = "down_proj", also: tuple[int, ...] = (), positions: str = "all"
                  ) -> dict[int, torch.Tensor]:
    """layer -> C (d, d) of the inputs of `module` ("down_proj": d = d_ff; "o_proj": W_O's input), float32, over
    every token of the first n_tokens ("all") or only those `entity_mask` marks ("entities").

    `also`: smaller token counts whose statistics the same pass saves as well (for a sweep over the statistics
    size). The model is causal, so the first m tokens' keys do not depend on what follows: the snapshot at m holds
    the keys a separate m-token run computes (up to float rounding of the longer last chunk's attention)."""
    if module not in MODULES:
        raise EditkitError(f"statistics are for one of {', '.join(MODULES)}, not {module!r}")
    layers = [layers] if isinstance(layers, int) else sorted(set(layers))
    if n_tokens < 10 or any(m < 10 for m in also):
        raise EditkitError("the statistics need at least 10 tokens")
    if positions not in POSITIONS:
        raise EditkitError(f"positions must be one of {', '.join(POSITIONS)}, not {positions!r}")
    out, todo = {}, []
    for l in layers:
        hit = _load(lm, l, n_tokens, module, positions)
        if hit:
            out[l] = hit[0].to(lm.device)
        else:
            todo.append(l)
    if not todo:
        return out
    began = time.perf_counter()
    try:
        return _pass(lm, todo, out, n_tokens, progress, seq_len, module, also, positions)
    finally:
        _SPENT.seconds = spent() + time.perf_counter() - began


def _pass(lm, todo, out, n_tokens, progress, seq_len, module, also, positions) -> dict[int, torch.Tensor]:
    """second_moment's streaming pass over the corpus for the layers `todo` (not cached), added to `out`."""
    a = lm.adapter
    d = key_width(lm, module)
    sites = {l: Site(MODULES[module], l) for l in todo}
    sums = {l: torch.zeros(d, d, dtype=torch.float64) for l in todo}
    snaps = sorted(m for m in set(also) if m < n_tokens)
    count, body, start = 0, 0, time.perf_counter()  # count: rows averaged (BOS included); body: tokens w/o BOS
    goal = min(n_tokens, corpus_tokens(lm.tok)) if progress else n_tokens

    def save(layer_sums, rows, n_key):
        for l in todo:
            C = (layer_sums[l] / rows).float()
            _save(C, {"model": lm.name, "layer": l, "module": a.name(module, l), "corpus": NOTICE,
                      "tokens": rows, "dtype": "float32 (accumulated in float64)", "positions": positions,
                      "seconds": round(time.perf_counter() - start, 1)}, _path(lm, l, n_key, module, positions))
            if n_key == n_tokens:
                out[l] = C.to(lm.device)

    for chunk in token_chunks(lm.tok, n_tokens, seq_len):
        ids = torch.tensor([chunk], device=lm.device)
        with unedited():  # C is a property of the base model, whoever asks for it; the run stops at the last site
            keys = lm.runner.read(sites, input_ids=ids)
        head = 1 if lm.tok.bos_token_id is not None and chunk[0] == lm.tok.bos_token_id else 0
        n_body = len(chunk) - head
        keep = torch.tensor(entity_mask(lm.tok, chunk) if positions == "entities" else [True] * len(chunk))
        while snaps and body + n_body >= snaps[0]:  # a snapshot size ends inside this chunk
            cut = head + snaps[0] - body
            part = {}
            for l in todo:
                k = keys[l][0, :cut][keep[:cut].to(keys[l].device)].float()
                part[l] = sums[l] + (k.T @ k).double().cpu()
            save(part, count + int(keep[:cut].sum()), snaps.pop(0))
        for l in todo:
            k = keys[l][0][keep.to(keys[l].device)].float()  # (tokens kept, d_ff)
            sums[l] += (k.T @ k).double().cpu()  # per-chunk float32 product, float64 running sum
        count += int(keep.sum())
        body += n_body
        if progress:
            progress(min(count / goal, 1.0), f"statistics for layer{'s' if len(todo) > 1 else ''} "
                     f"{', '.join(map(str, todo))}: {count:,}/{goal:,} tokens, "
                     f"{eta(time.perf_counter() - start, count, goal)}")
    for m in snaps:  # the corpus ended first: a separate run of m tokens would also use all of it
        save(sums, count, m)
    save(sums, count, n_tokens)
    return out


def mix_entities(C: torch.Tensor, C_ent: torch.Tensor, weight: float) -> torch.Tensor:
    """(1 - beta) C + beta C_ent (module docstring); beta = 0 returns C."""
    if not 0 <= weight <= 1:
        raise EditkitError(f"mom2_entity_weight must be between 0 and 1, not {weight}")
    return C if weight == 0 else (1 - weight) * C + weight * C_ent


def estimate(C: torch.Tensor, shrinkage: float = 0.0) -> torch.Tensor:
    """The second moment the methods use: (1 - alpha) C + alpha diag(C) (module docstring); alpha = 0 returns C."""
    if not 0 <= shrinkage <= 1:
        raise EditkitError(f"mom2_shrinkage must be between 0 and 1, not {shrinkage}")
    if shrinkage == 0:
        return C
    return (1 - shrinkage) * C + shrinkage * torch.diag(torch.diagonal(C))


def positions_for(hp) -> tuple[str, ...]:
    """The token positions whose statistics key_statistics reads for `hp`: all tokens, and the entity tokens too
    when mom2_entity_weight mixes them in (what a method declares for its first use, methods.FirstUse)."""
    return ("all", "entities") if hp.mom2_entity_weight else ("all",)


def key_statistics(lm, layers, hp, progress=None, module: str = "down_proj") -> dict[int, torch.Tensor]:
    """layer -> the estimated C of `module`'s inputs for a method's hyperparameters (mom2_n_tokens tokens,
    mom2_entity_weight, mom2_shrinkage): what ROME, MEMIT and PMET solve with (AlphaEdit solves with the plain
    C and its null space, nullspace.py)."""
    C = second_moment(lm, layers, hp.mom2_n_tokens, progress=progress, module=module)
    beta = hp.mom2_entity_weight
    if "entities" in positions_for(hp):
        C_ent = second_moment(lm, layers, hp.mom2_n_tokens, progress=progress, module=module, positions="entities")
        C = {l: mix_entities(C[l], C_ent[l], beta) for l in C}
    return {l: estimate(c, hp.mom2_shrinkage) for l, c in C.items()}


def cholesky(lm, layer: int, hp, module: str = "down_proj", C: torch.Tensor | None = None) -> torch.Tensor | None:
    """The lower Cholesky factor L (float64, L L^T = C) of the estimated C of `layer` for `hp` (key_statistics),
    cached beside C: ROME's C^-1 k* and MEMIT's (lam C + K K^T)^-1 then cost triangular solves on every edit
    instead of a d x d factorization (Gemma: 0.3 CPU-s per layer and edit). `C`: that estimate, when the caller
    holds it. None when C is not positive definite (the callers then solve directly)."""
    path = STORE.path(f"chol-layer{layer}", ".safetensors", within=lm.name, module=module, corpus="wikitext2-valid",
                      n_tokens=hp.mom2_n_tokens, shrinkage=hp.mom2_shrinkage, entities=hp.mom2_entity_weight)

    def build():
        c = (C if C is not None else key_statistics(lm, [layer], hp, module=module)[layer]).double().cpu()
        L, info = torch.linalg.cholesky_ex(c)
        return {"L": L if int(info) == 0 else torch.zeros(0, 0, dtype=torch.float64)}

    def write(tmp, value):
        from safetensors.torch import save_file

        save_file({"L": value["L"].contiguous()}, str(tmp))

    def read(p):
        from safetensors import safe_open

        with safe_open(str(p), "pt") as f:
            return {"L": f.get_tensor("L").clone()}

    L = STORE.get_or_build(path, build, read, write)["L"]
    return L.to(lm.device) if L.numel() else None


def _save(C, meta, path):
    from safetensors.torch import save_file

    STORE.put(path, C, lambda tmp, C: save_file({"C": C.contiguous().cpu()}, str(tmp),
                                                metadata={"provenance": json.dumps(meta)}))


def missing(lm, layers, n_tokens: int, module: str = "down_proj", positions: str = "all") -> list[int]:
    """The layers whose statistics are not cached yet (what a first edit will compute); `lm` or its name."""
    return [l for l in ([layers] if isinstance(layers, int) else sorted(set(layers)))
            if not _path(lm, l, n_tokens, module, positions).exists()]


def pass_seconds(lm, layers, n_tokens: int, module: str = "down_proj", positions: str = "all",
                 n_layers: int | None = None) -> float | None:
    """How long a statistics pass for `layers` will take on this model, from the seconds recorded in the cached
    statistics of another layer (a pass stops after its highest layer, so the time scales with it); None when none
    is cached for this model, module and size yet. `lm`: the model, or its name with its `n_layers`."""
    from safetensors import safe_open

    top = max([layers] if isinstance(layers, int) else layers)
    for l in range((n_layers or lm.adapter.n_layers) - 1, -1, -1):
        path = _path(lm, l, n_tokens, module, positions)
        if not path.exists():
            continue
        try:
            with safe_open(str(path), "pt") as f:
                seconds = json.loads(f.metadata()["provenance"]).get("seconds")
        except Exception:  # noqa: BLE001 - an unreadable entry gives no timing; the cache rebuilds it when used
            continue
        if seconds:
            return seconds * (top + 1) / (l + 1)
    return None


def provenance(lm, layer: int, n_tokens: int) -> dict | None:
    hit = _load(lm, layer, n_tokens)
    return hit[1] if hit else None
