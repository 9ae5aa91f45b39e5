"""A class pack: every result the lesson's steps show, computed once by `python -m editkit lesson build`, so the page
draws each step from files (instant for a whole class) and never from the model.

A pack is a folder of JSON files (no pickle):

    manifest.json                 {"kind": "editkit-lesson-pack", "format": 1, "model", "fingerprint", "layers",
                                   "editkit_version", "settings", "methods", "facts": [fact ids, in order], ...}
    facts/<id>/fact.json          the request, its new targets, where it came from, the known-fact check
    facts/<id>/lens.json          step 1: predictions and logit lens
    facts/<id>/trace.json         steps 2-3: {"traces": {hidden, mlp, attn}, "severing": ...}
    facts/<id>/memories.json      step 4: FFN memories at the MLP trace's peak
    facts/<id>/edit-<t>-<m>.json  steps 5, 8: method m's edit to target number t, measured before and after
    facts/<id>/retrace-<t>-<m>.json   step 6: the edited model's hidden-state trace
    facts/<id>/bleed-<t>.json     step 7: the ROME edit's bleed map
    facts/<id>/sweep.json         step 9: ROME at every layer (the first target)
    facts/<id>/ripple-<t>.json    step 11: the implied facts before and after the ROME edit and in context

Every file is written atomically (a temporary file renamed into place), so an interrupted build leaves whole files
only and a rerun computes just the missing ones.

A fact is served once the manifest lists it (every part built), and before that while a live build computes it
(building.py: facts/<id>/building.json, with the build's heartbeat) once the parts of its first steps are there
(FIRST); each step opens when the parts it needs (step_parts) are written.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from ..core.cache import atomic_write
from ..core.errors import EditkitError
from ..core.paths import ASSETS, ROOT, cache_dir

KIND = "editkit-lesson-pack"
FORMAT = 1
MANIFEST = "manifest.json"
SHIPPED = ASSETS / "lesson"  # the default pack (built by the command on the embedded model)
ENV = "EDITKIT_LESSON"
BUILDING = "building.json"  # facts/<id>/building.json: a fact being built (building.py writes it)
STALE = 45.0  # a status not rewritten for this long belongs to a build that is gone (building.HEARTBEAT: 5 s)


@lru_cache(maxsize=1)
def editkit_version() -> str:
    """The code that computed a pack: the git commit of this checkout when there is one."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "editkit"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return f"git {out.stdout.strip()}" + (" with local changes to editkit/" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def built_on(manifest: dict) -> str:
    """" (23 Nov 2026)" from a manifest's creation time, "" without one: when a pack was made, as a student reads it
    (a fact added later has its own time: Pack.built)."""
    day = day_of(manifest.get("created"))
    return f" ({day})" if day else ""


def day_of(when: str | None) -> str:
    """"28 Nov 2026" from "2026-11-28T14:05:09"; "" for no (or an unreadable) time."""
    import time

    try:
        return time.strftime("%d %b %Y", time.strptime(when, "%Y-%m-%dT%H:%M:%S")).lstrip("0")
    except (TypeError, ValueError):
        return ""


def write_json(path: Path, value) -> None:
    """Atomically: readers and a resumed build never see half a file."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    atomic_write(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_json(path: Path):
    """The file's JSON, or None when it is missing or unreadable (a broken part is recomputed by a rebuild)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def edit_name(target: int, method: str) -> str:
    return f"edit-{target}-{method}"


def retrace_name(target: int, method: str) -> str:
    return f"retrace-{target}-{method}"


def ripple_name(target: int) -> str:
    return f"ripple-{target}"


def bleed_name(target: int) -> str:
    return f"bleed-{target}"


FIRST = ("lens", "trace")  # the parts of the first steps (1-3): a fact being built is served once they are written
TARGETED = (5, 6, 7, 8, 11)  # the steps about an edit to one of the fact's new targets


def step_parts(step: int, target: int, methods: list[str]) -> tuple[str, ...]:
    """The parts step `step` shows, for the new target number `target` (the steps about an edit, TARGETED): it
    opens, for a fact being built, once they are all written. Step 10 shows editkit's shipped lifelong runs."""
    edits = tuple(edit_name(target, m) for m in methods)
    return {1: ("lens",), 2: ("trace",), 3: ("trace",), 4: ("memories",), 5: (edit_name(target, "rome"),),
            6: edits + tuple(retrace_name(target, m) for m in methods), 7: (bleed_name(target),), 8: edits,
            9: ("sweep",), 10: (), 11: (ripple_name(target),)}[step]


class Pack:
    """A pack folder, read lazily; parts are cached in memory (shared by every session of a server)."""

    def __init__(self, folder, manifest: dict):
        self.folder = Path(folder)
        self.manifest = manifest
        self._parts: dict = {}

    @classmethod
    def open(cls, folder) -> "Pack":
        folder = Path(folder)
        manifest = read_json(folder / MANIFEST)
        if not isinstance(manifest, dict) or manifest.get("kind") != KIND:
            raise EditkitError(f"{folder} is not a lesson pack (no {MANIFEST} of an editkit lesson pack); build one "
                               "with: python -m editkit lesson build --facts FILE --out DIR")
        if manifest.get("format") != FORMAT:
            raise EditkitError(f"{folder} is a lesson pack of format {manifest.get('format')}; this editkit reads "
                               f"format {FORMAT}: rebuild it with python -m editkit lesson build")
        return cls(folder, manifest)

    @property
    def model(self) -> str:
        return self.manifest["model"]

    @property
    def methods(self) -> list[dict]:
        return self.manifest.get("methods", [])

    @property
    def fact_ids(self) -> list[str]:
        """The facts every part of which is built (listed in the manifest)."""
        return [f for f in self.manifest.get("facts", []) if self.fact(f) is not None]

    def building_ids(self) -> list[str]:
        """The facts a live build is computing whose first steps' parts (FIRST) are written, oldest first: served
        step by step (a build that stopped, was cancelled or was killed serves nothing of its fact)."""
        listed = set(self.manifest.get("facts", []))
        found = []
        for path in (self.folder / "facts").glob(f"*/{BUILDING}"):
            fid = path.parent.name
            now = building_status(self.folder, fid)
            if fid not in listed and now is not None and self.fact(fid) is not None \
                    and all(self.part(fid, n) is not None for n in FIRST):
                found.append((now.get("started", 0), fid))
        return [fid for _, fid in sorted(found)]

    def served_ids(self) -> list[str]:
        """What students may open: the built facts, then the ones being built (building_ids)."""
        return self.fact_ids + self.building_ids()

    def missing_for(self, fid: str, step: int, target: int = 0) -> list[str]:
        """The parts step `step` (for new target number `target`) still lacks: [] once it is open."""
        names = step_parts(step, target, self.manifest.get("method_names", ["rome"]))
        return [n for n in names if self.part(fid, n) is None]

    def built(self, fid: str) -> str | None:
        """When the fact was built ("2026-11-28T14:05:09"): its own time in the manifest ("built", a fact added
        after the pack was made), else the pack's creation (the pack's first facts); None while it is built."""
        if fid not in self.manifest.get("facts", []):
            return None
        return (self.manifest.get("built") or {}).get(fid) or self.manifest.get("created")

    def fact(self, fid: str) -> dict | None:
        return self.part(fid, "fact")

    def part(self, fid: str, name: str) -> dict | None:
        """facts/<fid>/<name>.json, or None when the pack lacks it (not built yet)."""
        key = (fid, name)
        if key not in self._parts:
            value = read_json(self.folder / "facts" / fid / f"{name}.json")
            if value is None:
                return None  # not cached: a build may still add it
            self._parts[key] = value
        return self._parts[key]

    def expected(self, fid: str) -> list[str]:
        """The part names a complete fact has (its targets x the pack's methods)."""
        fact = self.fact(fid) or {}
        methods = self.manifest.get("method_names", [])
        names = ["lens", "trace", "memories"]
        for t in range(len(fact.get("targets", []))):
            names += [n for m in methods for n in (edit_name(t, m), retrace_name(t, m))] + [bleed_name(t)]
            names.append(ripple_name(t))
        return names + ["sweep"]

    def missing(self, fid: str) -> list[str]:
        return [n for n in self.expected(fid) if self.part(fid, n) is None]

    def size(self) -> int:
        """Bytes on disk."""
        return sum(p.stat().st_size for p in self.folder.rglob("*") if p.is_file())

    def stamp(self) -> float:
        """Changes when the manifest is rewritten (a fact added): the page reopens the pack."""
        try:
            return (self.folder / MANIFEST).stat().st_mtime
        except OSError:
            return 0.0


def building_status(folder: Path, fid: str, now: float | None = None) -> dict | None:
    """The status of a fact being built (building.Status wrote it), or None: no build, or one that stopped
    beating (killed) STALE seconds ago."""
    import time

    found = read_json(Path(folder) / "facts" / fid / BUILDING)
    now = time.time() if now is None else now
    if not isinstance(found, dict) or now - float(found.get("heartbeat") or 0) > STALE:
        return None
    return found


def served_folder() -> Path:
    """The pack the app serves: $EDITKIT_LESSON, else the class's copy a teacher added facts to (in the cache),
    else the shipped default."""
    env = os.environ.get(ENV, "").strip()
    if env:
        return Path(env).expanduser()
    copy = class_copy()
    return copy if (copy / MANIFEST).exists() else SHIPPED


def class_copy() -> Path:
    return cache_dir("lesson") / "class-pack"


def writable_folder() -> Path:
    """Where a teacher's new fact goes: $EDITKIT_LESSON, else a copy of the shipped pack in the cache (made on
    first use, so the repository's pack stays as shipped)."""
    env = os.environ.get(ENV, "").strip()
    if env:
        return Path(env).expanduser()
    copy = class_copy()
    if not (copy / MANIFEST).exists() and (SHIPPED / MANIFEST).exists():
        tmp = copy.with_name(f".class-pack-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(SHIPPED, tmp)
        shutil.rmtree(copy, ignore_errors=True)
        os.replace(tmp, copy)
    return copy


def reset_class_copy() -> None:
    """Back to the shipped pack (the teacher's added facts are dropped)."""
    shutil.rmtree(class_copy(), ignore_errors=True)
