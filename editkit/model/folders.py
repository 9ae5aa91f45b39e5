"""Where a converted model lives: the cache folders editkit writes once (the shipped models' and GGUF files'
float32 safetensors), named without importing torch so that a light caller (model/quick.py) can find them.

    MODELS.path("gemma-3-270m", suffix="")   # <cache>/models/gemma-3-270m.v1
    converted("gemma-3-270m")                # that folder when it is complete, else None (nothing is built)
"""
from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from ..core.cache import Store
from ..core.errors import EditkitError
from .shipped import SHIPPED

MODELS = Store("models", version=1)


def checked_name(name: str) -> str:
    """The stripped model name, or an EditkitError for an empty or unprintable one."""
    name = (name or "").strip()
    if not name:
        raise EditkitError("no model name given")
    if "\x00" in name or len(name) > 300 or not name.isprintable():
        raise EditkitError("a model name is a hub id (owner/name) or a folder path of at most 300 printable "
                           "characters")
    return name


def gguf_file(name: str) -> Path | None:
    """The GGUF file `name` names (a path ending in .gguf that exists), else None."""
    path = Path(name).expanduser()
    return path.absolute() if name.lower().endswith(".gguf") and path.is_file() else None


def gguf_key(path: Path) -> str:
    """The cache key of a GGUF file's conversion: its name and a digest of its size and first and last MiB
    (a file replaced by another under the same name converts afresh; reading the whole file would take a
    minute per GB). Read once per file version (the estimate and the load both ask)."""
    stat = path.stat()
    return _gguf_key(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _gguf_key(path: Path, size: int, mtime_ns: int) -> str:
    h = hashlib.sha256(str(size).encode())
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        h.update(f.read(1 << 20))
    stem = "".join(c if c.isalnum() or c in "-_." else "-" for c in path.stem)[:80]
    return f"gguf-{stem}-{h.hexdigest()[:12]}"


def converted(name: str) -> Path | None:
    """The complete float32 folder a shipped model's or GGUF file's name was converted to, or None: not such a
    name, not converted yet, or a folder that fails its manifest check (the next load rebuilds it)."""
    name = checked_name(name)
    if name in SHIPPED:
        key = name
    elif (gguf := gguf_file(name)) is not None:
        key = gguf_key(gguf)
    else:
        return None
    folder = MODELS.path(key, suffix="")
    return folder if MODELS.complete(folder) else None
