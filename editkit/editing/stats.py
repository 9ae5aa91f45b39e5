"""Second-moment statistics C = E[k k^T] of the down-projection inputs (ROME Eq. 2's C; MEMIT Eq. 14's C_0), or of
the attention output projection's inputs for PMET's MHSA-update ablation.

One streaming pass over the shipped WikiText-2 text collects every requested layer at once (the forward pass stops
after the highest requested layer). Cached per model and layer as safetensors with a JSON provenance record
(model, layer, corpus, token count, dtype); always computed on the base weights (`weights.unedited`), also
inside a session with edits, so the entry under the model's name is the base model's. kmeng01/rome and EasyEdit `.npz` files can be imported. A token count
above the split's size uses all of it (the provenance records the real count).

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
import time
from pathlib import Path

import numpy as np
import torch

from ..corpus import NOTICE, corpus_tokens, token_chunks
from ..errors import EditkitError
from ..hooks import Hooks
from ..cache import Store
from ..weights import unedited
from ..sites import Site


# the key site of each editable linear map: the FFN down-projection's input (every method), or W_O's (PMET's
# MHSA update)
MODULES = {"down_proj": "mlp_key", "o_proj": "attn_z"}


def _width(lm, module: str) -> int:
    return lm.adapter.weight(module, 0).shape[1]


STORE = Store("stats", version=2)  # one safetensors file per entry: C, with its provenance as metadata


POSITIONS = ("all", "entities")


def _path(lm, layer: int, n_tokens: int, module: str = "down_proj", positions: str = "all") -> Path:
    extra = {} if positions == "all" else {"positions": positions}
    return STORE.path(f"layer{layer}", ".safetensors", within=lm.name, module=module, corpus="wikitext2-valid",
                      n_tokens=n_tokens, **extra)


def _read(path: Path, d: int) -> tuple[torch.Tensor, dict]:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        C = f.get_tensor("C").clone()  # no mmap left behind
        meta = json.loads(f.metadata()["provenance"])
    if C.shape != (d, d) or not torch.isfinite(C).all():
        raise ValueError("bad shape or values")
    return C, meta


def _load(lm, layer, n_tokens, module="down_proj", positions="all"):
    return STORE.get(_path(lm, layer, n_tokens, module, positions), lambda p: _read(p, _width(lm, module)))


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
    a = lm.adapter
    d = _width(lm, module)
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
        with Hooks(lm) as hooks, unedited():  # C is a property of the base model, whoever asks for it
            keys = hooks.capture(sites)
            lm.runner.run_until(sites[max(todo)], input_ids=ids)
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


def eta(elapsed: float, done: float, total: float) -> str:
    """'about 40 s left' from the rate so far (a time estimate for progress messages)."""
    if done <= 0 or done >= total:
        return "almost done" if done >= total else "estimating time"
    left = elapsed / done * (total - done)
    return f"about {left:.0f} s left" if left < 120 else f"about {left / 60:.1f} min left"


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


def key_statistics(lm, layers, hp, progress=None, module: str = "down_proj") -> dict[int, torch.Tensor]:
    """layer -> the estimated C of `module`'s inputs for a method's hyperparameters (mom2_n_tokens tokens,
    mom2_entity_weight, mom2_shrinkage): what ROME, MEMIT and PMET solve with."""
    C = second_moment(lm, layers, hp.mom2_n_tokens, progress=progress, module=module)
    beta = getattr(hp, "mom2_entity_weight", 0.0)
    if beta:
        C_ent = second_moment(lm, layers, hp.mom2_n_tokens, progress=progress, module=module, positions="entities")
        C = {l: mix_entities(C[l], C_ent[l], beta) for l in C}
    return {l: estimate(c, hp.mom2_shrinkage) for l, c in C.items()}


def _save(C, meta, path):
    from safetensors.torch import save_file

    STORE.put(path, C, lambda tmp, C: save_file({"C": C.contiguous().cpu()}, str(tmp),
                                                metadata={"provenance": json.dumps(meta)}))


def missing(lm, layers, n_tokens: int, module: str = "down_proj", positions: str = "all") -> list[int]:
    """The layers whose statistics are not cached yet (what a first edit will compute)."""
    return [l for l in ([layers] if isinstance(layers, int) else sorted(set(layers)))
            if not _path(lm, l, n_tokens, module, positions).exists()]


def provenance(lm, layer: int, n_tokens: int) -> dict | None:
    hit = _load(lm, layer, n_tokens)
    return hit[1] if hit else None


def import_npz(lm, layer: int, path, n_tokens: int) -> dict:
    """Import kmeng01/rome / EasyEdit statistics (`{layer_name}_float32_mom2_100000.npz`, keys `mom2.mom2` (sum of
    k k^T) and `mom2.count`) as the cache entry for (layer, n_tokens)."""
    try:
        data = np.load(path, allow_pickle=False)
        mom2, count = data["mom2.mom2"], float(data["mom2.count"])
    except (OSError, ValueError, KeyError) as exc:
        raise EditkitError(f"cannot import statistics from {path}: {exc}") from None
    C = torch.from_numpy(np.asarray(mom2, dtype=np.float64) / count).float()
    if C.shape != (lm.adapter.d_ff, lm.adapter.d_ff):
        raise EditkitError(f"{path} holds a {tuple(C.shape)} matrix; this model's d_ff is {lm.adapter.d_ff}")
    meta = {"model": lm.name, "layer": layer, "corpus": f"imported from {Path(path).name}", "tokens": int(count),
            "dtype": str(mom2.dtype)}
    _save(C, meta, _path(lm, layer, n_tokens))
    return meta


# --- the spectrum of C and AlphaEdit's null-space projector ------------------------------------------------------
#
# AlphaEdit (Fang et al. 2025, Sec. 3.2 and jianghoucheng/AlphaEdit experiments/evaluate.py `get_project`): with
# C = U diag(e) U^T, the eigen-directions whose eigenvalue is small are those ordinary text barely uses; P = U0 U0^T
# projects onto them, and an update Delta P leaves every key in the span of the other eigenvectors unchanged. Both the
# eigendecomposition and each projector are cache entries beside C (same store, keyed by C's own parameters).

NULL_RULES = {
    "absolute": "eigenvalue < threshold (upstream AlphaEdit: 2e-2 for GPT-2 XL, GPT-J and Llama3-8B statistics)",
    "relative": "eigenvalue < threshold x the largest eigenvalue",
    "energy": "the smallest eigen-directions whose eigenvalues sum to at most threshold x trace C = E||k||^2: the "
              "keys of ordinary text keep at most that fraction of their squared norm where the update acts",
}


def _read_tensors(path: Path, names: tuple[str, ...], d: int) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        out = {n: f.get_tensor(n).clone() for n in names}
        meta = json.loads(f.metadata()["info"])
    if any(t.shape[0] != d or not torch.isfinite(t).all() for t in out.values()):
        raise ValueError("bad shape or values")
    return {**out, "info": meta}


def _write_tensors(tmp: Path, value: dict) -> None:
    from safetensors.torch import save_file

    tensors = {k: v.contiguous().cpu() for k, v in value.items() if k != "info"}
    save_file(tensors, str(tmp), metadata={"info": json.dumps(value["info"])})


def eigen(lm, layer: int, n_tokens: int = 20000, module: str = "down_proj") -> tuple[torch.Tensor, torch.Tensor]:
    """C = U diag(e) U^T for the statistics of `layer`: (e ascending, U), float64, cached beside C."""
    path = STORE.path(f"eigen-layer{layer}", ".safetensors", within=lm.name, module=module, corpus="wikitext2-valid",
                      n_tokens=n_tokens)
    d = _width(lm, module)

    def build():
        C = second_moment(lm, [layer], n_tokens, module=module)[layer].double().cpu()
        e, U = torch.linalg.eigh(C)  # C is symmetric: eigh, not upstream's SVD (the same for a PSD matrix)
        return {"e": e, "U": U, "info": {"layer": layer, "module": module, "n_tokens": n_tokens}}

    hit = STORE.get_or_build(path, build, lambda p: _read_tensors(p, ("e", "U"), d), _write_tensors)
    return hit["e"], hit["U"]


def null_dimension(e: torch.Tensor, rule: str, threshold: float) -> int:
    """How many of the eigenvalues e (ascending) fall in the null space under `rule` (NULL_RULES)."""
    if rule not in NULL_RULES:
        raise EditkitError(f"null-space rule must be one of {', '.join(NULL_RULES)}, not {rule!r}")
    e = e.double().clamp_min(0)  # a PSD matrix; rounding can leave tiny negative eigenvalues
    if rule == "absolute":
        return int((e < threshold).sum())
    if rule == "relative":
        return int((e < threshold * e.max()).sum())
    return int((e.cumsum(0) <= threshold * e.sum()).sum())


def _null_info(e: torch.Tensor, layer: int, rule: str, threshold: float) -> dict:
    k = null_dimension(e, rule, threshold)
    ep = e.clamp_min(0)
    return {"layer": layer, "rule": rule, "threshold": float(threshold), "dimension": k, "width": int(e.numel()),
            "largest_null_eigenvalue": float(ep[k - 1]) if k else None,
            "null_energy": float(ep[:k].sum() / ep.sum()) if k else 0.0}


def null_space_basis(lm, layer: int, rule: str, threshold: float,
                     n_tokens: int = 20000) -> tuple[torch.Tensor, dict]:
    """U0 (d, k, float64): orthonormal eigenvectors of C spanning AlphaEdit's null space (P = U0 U0^T), and the
    summary of null_space_projector."""
    e, U = eigen(lm, layer, n_tokens)
    info = _null_info(e, layer, rule, threshold)
    return U[:, :info["dimension"]].to(lm.device), info


def null_space_projector(lm, layer: int, rule: str, threshold: float,
                         n_tokens: int = 20000) -> tuple[torch.Tensor, dict]:
    """AlphaEdit's P = U0 U0^T (d, d, float64) onto the eigen-directions of C selected by `rule`, and a JSON
    summary (null-space dimension, the eigenvalue cut, the share of trace C inside the null space). Cached."""
    null_dimension(torch.zeros(1), rule, threshold)  # an unknown rule fails before any work
    path = STORE.path(f"projector-layer{layer}", ".safetensors", within=lm.name, module="down_proj",
                      corpus="wikitext2-valid", n_tokens=n_tokens, rule=rule, threshold=float(threshold))

    def build():
        e, U = eigen(lm, layer, n_tokens)
        info = _null_info(e, layer, rule, threshold)
        U0 = U[:, :info["dimension"]]
        return {"P": U0 @ U0.T, "info": info}

    hit = STORE.get_or_build(path, build, lambda p: _read_tensors(p, ("P",), _width(lm, "down_proj")),
                             _write_tensors)
    return hit["P"].to(lm.device), hit["info"]
