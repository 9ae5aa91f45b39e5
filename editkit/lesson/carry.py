"""A pack's statistics, carried with it to another machine (`lesson build --keep-statistics`).

A fact's layer sweep edits every layer, so the first fact added on a machine first computes the key statistics of
every layer (C = E[k k^T] over 20,000 WikiText tokens; editing/stats.py): minutes on a CPU. `keep` copies the model's
statistics, context templates and tracing noise scale from this machine's cache into the pack folder
(`statistics/`, the cache's own file names: safetensors and JSON, no pickle); `restore`, called by every build of
that pack, copies the ones the cache lacks back into it, so a pack moved to a class's server adds its next fact at
the cached speed. Only exact copies move: each file keeps the name that is its key (model, layer, tokens, corpus),
the pack records the weights it was built on, and a build refuses other weights before anything is restored. The
derived factors (Cholesky factors, eigendecompositions) are left behind: they are recomputed from C in seconds.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from ..core.paths import cache_dir, safe_name

FOLDER = "statistics"


def _entries(model: str) -> list[tuple[str, str]]:
    """(cache folder, file-name pattern) of what a pack's computations read from the cache for `model`."""
    name = safe_name(model)
    return [(f"stats/{name}", "layer*.safetensors"), ("templates", f"{name}*"), ("tracing/sigma", f"{name}*")]


def keep(model: str, folder: Path) -> int:
    """Copy the model's statistics, templates and noise scale from the cache into the pack; returns the bytes."""
    total = 0
    for where, pattern in _entries(model):
        target = Path(folder) / FOLDER / where
        for path in sorted(cache_dir(where).glob(pattern)):
            target.mkdir(parents=True, exist_ok=True)
            if not (target / path.name).exists():
                shutil.copy2(path, target / path.name)
            total += path.stat().st_size
    return total


def restore(model: str, folder: Path) -> list[str]:
    """Copy into the cache every carried file it lacks (never over an existing entry); returns their names."""
    copied = []
    for where, pattern in _entries(model):
        source = Path(folder) / FOLDER / where
        if not source.is_dir():
            continue
        for path in sorted(source.glob(pattern)):
            target = cache_dir(where) / path.name
            if not target.exists():
                tmp = target.with_name(f".{target.name}.carry")
                shutil.copy2(path, tmp)
                tmp.replace(target)  # atomic, as every cache write
                copied.append(f"{where}/{path.name}")
    return copied
