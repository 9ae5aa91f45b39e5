"""Reuse optimized target vectors across edits that differ only in how the update is solved.

A hyperparameter sweep (evaluation/sweep.py) edits the same requests many times. The target vectors (ROME's v*,
MEMIT's z, PMET's attention/MLP targets: targets.optimize_targets_batch) cost most of an edit, yet they do not
depend on the fields that only enter the solve afterwards (each Hparams class lists them in SOLVE_ONLY): the
statistics (mom2_n_tokens, mom2_shrinkage), MEMIT's lambda (mom2_update_weight), ROME's C = I switch and
denominator, PMET's W_O ablation, AlphaEdit's null space. Inside `reuse_targets()` the optimisation is memoized
on everything else:

    with reuse_targets():          # only here; everywhere else every edit optimizes afresh
        run_edit(lm, "rome", req, {"mom2_shrinkage": 0.0})
        run_edit(lm, "rome", req, {"mom2_shrinkage": 0.5})   # same v*, only Eq. 2 is solved again

The key holds the weights the context computes with (weights.fingerprint: base + active deltas), the requests'
prompt/subject/target, the layer, the sites, the adaptive rule and every hyperparameter not in its class's
SOLVE_ONLY (editing/hparams.py; fields a method adds are part of the key unless it lists them there, so a new method
is never wrongly reused), plus a digest of the optimisation's source (SOURCES), so a changed optimisation never
serves old vectors. Entries are kept in memory and, with `disk=True`, in the cache (safetensors tensors + JSON
losses) so an interrupted sweep resumes without re-optimizing.
"""
from __future__ import annotations

import contextvars
import functools
import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch

from ..core.cache import Store
from ..model.weights import fingerprint

if TYPE_CHECKING:
    from ..model.lm import LM

STORE = Store("targets", version=2)
# An optimisation's result as the memo keeps it: tensors by name and the JSON rest (targets.encode / decode)
Encoded = tuple[dict[str, torch.Tensor], dict[str, Any]]
_ACTIVE: contextvars.ContextVar[_Memo | None] = contextvars.ContextVar("editkit_targets_memo", default=None)
F = TypeVar("F", bound=Callable[..., Any])
# the files whose code the optimisation's result depends on (a change to any of them never serves old vectors)
SOURCES = ("targets.py", "target_rows.py", "target_stops.py", "joint.py", "keys.py")


class _Memo:
    def __init__(self, disk: bool) -> None:
        self.disk = disk
        self.entries: dict[str, Encoded] = {}
        self.hits = 0
        self.misses = 0


@contextmanager
def reuse_targets(disk: bool = True) -> Iterator[_Memo]:
    """Memoize target optimisations in this context (see the module docstring). Yields the memo (hits/misses)."""
    memo = _Memo(disk)
    token = _ACTIVE.set(memo)
    try:
        yield memo
    finally:
        _ACTIVE.reset(token)


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    here = Path(__file__).parent
    return hashlib.sha1(b"".join((here / f).read_bytes() for f in SOURCES)).hexdigest()[:12]


def memo_key(lm: LM, requests: Any, layer: Any, sites: Any, hp: Any, adaptive: bool, reference: bool = False,
             joint: Any = None) -> str:
    """The digest that identifies one target optimisation (see the module docstring)."""
    hp_part = {f.name: getattr(hp, f.name) for f in fields(hp) if f.name not in type(hp).SOLVE_ONLY}
    req_part = [[r.prompt, r.subject, r.target_new] for r in requests]
    text = json.dumps([lm.name, fingerprint(lm), req_part, layer, list(sites), hp_part, bool(adaptive),
                       _code_digest()] + (["reference"] if reference else []) + (joint.key() if joint else []),
                      sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def _own(encoded: Encoded) -> Encoded:
    """A copy whose tensors and JSON are its own."""
    tensors, meta = encoded
    return {k: t.detach().clone() for k, t in tensors.items()}, json.loads(json.dumps(meta))


def _write(tmp: Path, encoded: Encoded) -> None:
    from safetensors.torch import save_file

    tensors, meta = encoded
    save_file({k: t.detach().contiguous().cpu() for k, t in tensors.items()}, str(tmp),
              metadata={"meta": json.dumps(meta)})


def _read(path: Path, device: torch.device) -> Encoded:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = json.loads(f.metadata()["meta"])
        tensors = {key: f.get_tensor(key).clone().to(device) for key in f.keys()}
    return tensors, meta


def _lookup(memo: _Memo, lm: LM, key: str) -> Encoded | None:
    """The memo's entry for `key` (from memory, or the cache when the memo keeps its entries on disk), or None."""
    if key not in memo.entries and memo.disk:
        hit = STORE.get(STORE.path(lm.name, ".safetensors", key=key), lambda p: _read(p, lm.device))
        if hit is not None:
            memo.entries[key] = hit
    return memo.entries.get(key)


def _remember(memo: _Memo, lm: LM, key: str, encoded: Encoded) -> None:
    memo.entries[key] = _own(encoded)
    if memo.disk:
        STORE.put(STORE.path(lm.name, ".safetensors", key=key), encoded, _write)


def missing_alone(lm: LM, requests: Any, layers: list[int], sites: Any, hp: Any,
                  adaptive: bool = False) -> list[int]:
    """Of one-request optimisations (requests[j] at layers[j]), the ones the active memo does not hold yet (all of
    them outside reuse_targets(): nothing would keep them)."""
    memo = _ACTIVE.get()
    if memo is None:
        return []
    return [j for j, (r, l) in enumerate(zip(requests, layers))
            if _lookup(memo, lm, memo_key(lm, [r], l, sites, hp, adaptive)) is None]


def remember_alone(lm: LM, requests: Any, layers: list[int], sites: Any, hp: Any, adaptive: bool,
                   encoded: list[Encoded]) -> None:
    """Keep each request's result of a batch (encoded one by one) under the key of its own one-request
    optimisation (a layer sweep's targets optimized together, targets.optimize_layers), so the edit of each
    reuses it."""
    memo = _ACTIVE.get()
    if memo is not None:
        for r, l, one in zip(requests, layers, encoded):
            _remember(memo, lm, memo_key(lm, [r], l, sites, hp, adaptive), one)


def memoized(encode: Callable[[Any], Encoded], decode: Callable[[Encoded], Any]) -> Callable[[F], F]:
    """Decorator for targets.optimize_targets_batch, whose results `encode` writes and `decode` reads back:
    inside `reuse_targets()` an optimisation already done (same key) is returned instead of recomputed;
    outside it, the function runs unchanged."""

    def wrap(optimize: F) -> F:
        @functools.wraps(optimize)
        def wrapper(lm: LM, requests: Any, layer: Any, sites: Any, hp: Any, adaptive: bool = False,
                    progress: Any = None, reference: bool = False, joint: Any = None) -> Any:
            memo = _ACTIVE.get()
            if memo is None:
                return optimize(lm, requests, layer, sites, hp, adaptive, progress, reference, joint)
            key = memo_key(lm, requests, layer, sites, hp, adaptive, reference, joint)
            hit = _lookup(memo, lm, key)
            if hit is not None:
                memo.hits += 1
                if progress:
                    progress(1.0, "targets: reused from an earlier setting")
                return decode(_own(hit))
            memo.misses += 1
            result = optimize(lm, requests, layer, sites, hp, adaptive, progress, reference, joint)
            _remember(memo, lm, key, encode(result))
            return result

        return cast(F, wrapper)

    return wrap


__all__ = ["reuse_targets", "memoized", "memo_key", "missing_alone", "remember_alone", "Encoded"]
