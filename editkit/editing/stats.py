"""Second-moment statistics C = E[k k^T] of the down-projection inputs (ROME Eq. 2's C; MEMIT Eq. 14's C_0), or of
the attention output projection's inputs for PMET's MHSA-update ablation.

One streaming pass over the shipped WikiText-2 text collects every requested layer at once (the forward pass stops
after the highest requested layer). Cached per model and layer as safetensors with a JSON provenance record
(model, layer, corpus, token count, dtype); always computed on the base weights (`weights.unedited`), also
inside a session with edits, so the entry under the model's name is the base model's. kmeng01/rome and EasyEdit `.npz` files can be imported.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from ..corpus import NOTICE, token_chunks
from ..errors import EditkitError
from ..hooks import Hooks
from ..cache import Store
from .weights import unedited
from ..sites import Site


# the key site of each editable linear map: the FFN down-projection's input (ROME/MEMIT/PMET), or W_O's (PMET's
# MHSA update)
MODULES = {"down_proj": "mlp_key", "o_proj": "attn_z"}


def _width(lm, module: str) -> int:
    return lm.adapter.weight(module, 0).shape[1]


STORE = Store("stats", version=2)  # one safetensors file per entry: C, with its provenance as metadata


def _path(lm, layer: int, n_tokens: int, module: str = "down_proj") -> Path:
    return STORE.path(f"layer{layer}", ".safetensors", within=lm.name, module=module, corpus="wikitext2-valid",
                      n_tokens=n_tokens)


def _read(path: Path, d: int) -> tuple[torch.Tensor, dict]:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        C = f.get_tensor("C").clone()  # no mmap left behind
        meta = json.loads(f.metadata()["provenance"])
    if C.shape != (d, d) or not torch.isfinite(C).all():
        raise ValueError("bad shape or values")
    return C, meta


def _load(lm, layer, n_tokens, module="down_proj"):
    return STORE.get(_path(lm, layer, n_tokens, module), lambda p: _read(p, _width(lm, module)))


@torch.no_grad()
def second_moment(lm, layers, n_tokens: int = 20000, progress=None, seq_len: int = 128,
                  module: str = "down_proj") -> dict[int, torch.Tensor]:
    """layer -> C (d, d) of the inputs of `module` ("down_proj": d = d_ff; "o_proj": W_O's input), float32."""
    if module not in MODULES:
        raise EditkitError(f"statistics are for one of {', '.join(MODULES)}, not {module!r}")
    layers = [layers] if isinstance(layers, int) else sorted(set(layers))
    if n_tokens < 10:
        raise EditkitError("the statistics need at least 10 tokens")
    out, todo = {}, []
    for l in layers:
        hit = _load(lm, l, n_tokens, module)
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
    count, start = 0, time.perf_counter()
    for chunk in token_chunks(lm.tok, n_tokens, seq_len):
        ids = torch.tensor([chunk], device=lm.device)
        with Hooks(lm) as hooks, unedited():  # C is a property of the base model, whoever asks for it
            keys = hooks.capture(sites)
            lm.runner.run_until(sites[max(todo)], input_ids=ids)
        for l in todo:
            k = keys[l][0].float()  # (tokens, d_ff)
            sums[l] += (k.T @ k).double().cpu()  # per-chunk float32 product, float64 running sum
        count += ids.shape[1]
        if progress:
            progress(min(count / n_tokens, 1.0), f"statistics: {count:,}/{n_tokens:,} tokens")
    seconds = time.perf_counter() - start
    for l in todo:
        C = (sums[l] / count).float()
        _save(C, {"model": lm.name, "layer": l, "module": a.name(module, l), "corpus": NOTICE,
                  "tokens": count, "dtype": "float32 (accumulated in float64)", "seconds": round(seconds, 1)},
              _path(lm, l, n_tokens, module))
        out[l] = C.to(lm.device)
    return out


def _save(C, meta, path):
    from safetensors.torch import save_file

    STORE.put(path, C, lambda tmp, C: save_file({"C": C.contiguous().cpu()}, str(tmp),
                                                metadata={"provenance": json.dumps(meta)}))


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
