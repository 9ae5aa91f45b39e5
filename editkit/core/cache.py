"""One cache helper: every file editkit computes once and keeps (statistics, templates, noise scales, known facts,
trigger indexes, analyses, trace results) is an entry of a Store.

    STORE = Store("templates", version=2)
    path = STORE.path(lm.name, n=5, length=10, seed=0)          # <cache>/templates/<model>-<digest>.v2.json
    templates = STORE.get_or_build(path, lambda: generate(...))  # read it, or build, write and return it

- Keys are versioned: the store's version is part of every file name, so bumping it when the format or the
  computation changes makes old entries invisible (never silently reused).
- Writes are atomic: a temporary file in the same folder, renamed into place, so a reader never sees half a file
  and two writers never share a temporary name.
- An unreadable entry (the reader raises) is set aside as `<entry>.unreadable`, with a warning naming both files,
  and rebuilt: a lifelong checkpoint hours in the making is never deleted by a reader's failure.
- `refused(reason)`: inside it, this context's reads and writes of entries raise EditkitError(reason). An
  intervention (editkit/model/interventions.py) changes every run of its context, and the entries hold the
  model's numbers without it: none is read as if it held them, none is written with them.
"""
from __future__ import annotations

import contextvars
import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import CacheWarning, EditkitError
from .paths import cache_dir, safe_name

MANIFEST = "editkit-manifest.json"
_REFUSED: contextvars.ContextVar[str | None] = contextvars.ContextVar("editkit_cache_refused", default=None)


@contextmanager
def refused(reason: str) -> Iterator[None]:
    """A block in which this context's Store reads and writes raise EditkitError(reason) (module
    docstring)."""
    token = _REFUSED.set(reason)
    try:
        yield
    finally:
        _REFUSED.reset(token)


def _allowed() -> None:
    reason = _REFUSED.get()
    if reason is not None:
        raise EditkitError(reason)


def digest(*parts: Any, length: int = 12) -> str:
    """A short stable hash of JSON-serializable parts (sorted keys; other objects by their str)."""
    text = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:length]


def atomic_write(path: Path, write: Callable[[Path], None]) -> Path:
    """write(tmp) to a fresh temporary file beside `path`, then rename it onto `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_json(path: Path, value: Any) -> None:
    Path(path).write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")


@dataclass(frozen=True)
class Store:
    """A folder of cache entries under the editkit cache ($EDITKIT_CACHE) with one format version."""

    folder: str
    version: int = 1

    def path(self, name: str, suffix: str = ".json", within: str | None = None, **params: Any) -> Path:
        """The entry for `name` (a model name, ...) and params:
        <folder>[/<within>]/<name>[-<digest of params>].v<version><suffix>."""
        parts = [safe_name(str(part)) for part in str(self.folder).split("/")]
        if within is not None:
            parts.append(safe_name(within))
        stem = safe_name(name) + (f"-{digest(params)}" if params else "")
        return cache_dir(*parts) / f"{stem}.v{self.version}{suffix}"

    def get(self, path: Path, read: Callable[[Path], Any] = read_json) -> Any | None:
        """The entry's value, or None when it is missing or unreadable (then set aside: `set_aside`)."""
        _allowed()
        path = Path(path)
        if not path.exists():
            return None
        try:
            return read(path)
        except Exception as exc:  # noqa: BLE001 - any unreadable entry is rebuilt, its file kept
            set_aside(path, exc)
            return None

    def put(self, path: Path, value: Any, write: Callable[[Path, Any], None] = write_json) -> Path:
        _allowed()
        return atomic_write(path, lambda tmp: write(tmp, value))

    def get_or_build(self, path: Path, build: Callable[[], Any], read: Callable[[Path], Any] = read_json,
                     write: Callable[[Path, Any], None] = write_json) -> Any:
        value = self.get(path, read)
        if value is None:
            value = build()
            self.put(path, value, write)
        return value

    def complete(self, folder: Path) -> bool:
        """Whether a folder entry is in place with every file its manifest lists, at its size."""
        return Path(folder).exists() and _manifest_ok(Path(folder))

    def build_folder(self, final: Path, build: Callable[[Path], None],
                     say: Callable[[str], None] = lambda m: None) -> Path:
        """A folder entry built once by `build(tmp_folder)` and renamed into place. A manifest records every file's
        size; a folder whose files do not match it (truncated, missing) is deleted and rebuilt."""
        final = Path(final)
        if final.exists() and not _manifest_ok(final):
            say(f"cache {final} is incomplete or corrupt; rebuilding it")
            shutil.rmtree(final, ignore_errors=True)
        if final.exists():
            return final
        tmp = final.parent / f".{final.name}.tmp-{os.getpid()}-{time.time_ns()}"
        try:
            tmp.mkdir(parents=True)
            build(tmp)
            sizes = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
            (tmp / MANIFEST).write_text(json.dumps({"files": sizes}, indent=1))
            try:
                os.rename(tmp, final)
            except OSError:  # another process finished first; use its folder
                if not _manifest_ok(final):
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final


def set_aside(path: Path, exc: BaseException) -> Path | None:
    """Rename an unreadable entry to `<entry>.unreadable` (one per entry: a later one replaces it) and warn, so the
    next run rebuilds it while the file stays for its owner to inspect or restore. None when it is already gone."""
    aside = path.with_name(path.name + ".unreadable")
    try:
        os.replace(path, aside)
    except FileNotFoundError:  # another process set it aside first
        return None
    warnings.warn(f"cache entry {path} could not be read ({type(exc).__name__}: {exc}); it is kept as {aside} "
                  "and will be rebuilt", CacheWarning, stacklevel=3)
    return aside


def _manifest_ok(folder: Path) -> bool:
    try:
        files = json.loads((folder / MANIFEST).read_text())["files"]
        return bool(files) and all((folder / n).stat().st_size == size for n, size in files.items())
    except (OSError, ValueError, KeyError, TypeError):
        return False


@contextmanager
def overlay(keep: tuple[str, ...] = ()) -> Iterator[Path]:
    """A block run on a fresh, temporary cache that still sees the real cache's entries under `keep` (folders such as
    "models" or "stats", or "tracing/sigma": linked, not copied), removed afterwards: a benchmark's first use of
    everything else (editkit bench report). $EDITKIT_CACHE points at it inside the block, in this process."""
    real = cache_dir()
    tmp = Path(tempfile.mkdtemp(prefix="editkit-overlay-"))
    before = os.environ.get("EDITKIT_CACHE")
    try:
        for name in keep:
            source = real / name
            if source.exists():
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                (tmp / name).symlink_to(source, target_is_directory=source.is_dir())
        os.environ["EDITKIT_CACHE"] = str(tmp)
        yield tmp
    finally:
        if before is None:
            os.environ.pop("EDITKIT_CACHE", None)
        else:
            os.environ["EDITKIT_CACHE"] = before
        shutil.rmtree(tmp, ignore_errors=True)
