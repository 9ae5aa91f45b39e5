"""Which models a visitor of a served editkit may load (the operator's settings, editkit/core/settings.py).

    pickable(visitor)                         # the names the model picker offers this visitor
    check_model("../../etc", visitor)         # EditkitError naming the setting that refuses it
    may_type(visitor), may_trust(visitor)     # the "other" box and the trust_remote_code box

The settings' models.allowed (default: the shipped models) are open to every visitor; a browser on the server's
own machine also gets the tiny test models and, with models.free = "local" (the default), any hub id, folder or
GGUF file. With models.free = "anyone" a visitor from another machine may type hub ids too, and paths only inside
models.folders: a path is resolved first (`..`, symlinks), so one that leads outside is refused without saying
whether it exists. A folder whose model brings its own Python code (config.json's auto_map, *.py files) is refused
unless models.trust_remote_code lets this visitor tick trust_remote_code (default: nobody).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..core.errors import EditkitError
from ..core.settings import Settings, settings
from ..core.visitor import Visitor
from .loading import ALL_TINY, path_like, split_name
from .shipped import SHIPPED

GROUPS = {"shipped": tuple(SHIPPED), "tiny": ALL_TINY}  # names standing for lists in models.allowed


def allowed(s: Settings | None = None) -> list[str]:
    """The models every visitor may pick: models.allowed with "shipped" and "tiny" expanded, in order."""
    out: list[str] = []
    for name in (s or settings()).models:
        for n in GROUPS.get(name, (name,)):
            if n not in out:
                out.append(n)
    return out


def pickable(visitor: Visitor, s: Settings | None = None) -> list[str]:
    """The names the picker offers: the allowed ones, and for a local browser every shipped and tiny model."""
    names = allowed(s)
    if visitor.local:
        names += [n for n in (*SHIPPED, *ALL_TINY) if n not in names]
    return names


def may_type(visitor: Visitor, s: Settings | None = None) -> bool:
    """May this visitor type a model id or path of their own (the picker's "other" box)?"""
    return (s or settings()).who_may("models.free", visitor.local)


def may_trust(visitor: Visitor, s: Settings | None = None) -> bool:
    """May this visitor tick trust_remote_code (run a model's own Python code on the server)?"""
    return (s or settings()).who_may("models.trust_remote_code", visitor.local)


def _shown(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:77] + "...")


def check_model(name: str, visitor: Visitor, trust_remote_code: bool = False, s: Settings | None = None) -> None:
    """EditkitError (naming the setting) unless this visitor may load `name` (with trust_remote_code)."""
    s = s or settings()
    name = (name or "").strip()
    base = split_name(name)[0] if name else name
    if trust_remote_code and not may_trust(visitor, s):
        raise EditkitError(f"trust_remote_code runs a model's own Python code on this server; it is off for "
                           f"{visitor.describe()} ({s.cite('models.trust_remote_code')})")
    if base in allowed(s) or (visitor.local and base in (*SHIPPED, *ALL_TINY)):
        return
    if not may_type(visitor, s):
        who = "nobody" if s.free_models == "nobody" else "a browser on the server's own machine only"
        raise EditkitError(f"{_shown(name)} is not one of this server's models ({', '.join(allowed(s))}); other "
                           f"models are for {who} ({s.cite('models.free')})")
    is_path = path_like(base) or _exists(base)
    if is_path and not visitor.local:
        _inside_folders(base, s)
    if is_path and not trust_remote_code:
        _no_custom_code(base, visitor, s)


def _exists(name: str) -> bool:
    try:
        return Path(name).expanduser().exists()
    except (OSError, ValueError):
        return False


def _inside_folders(name: str, s: Settings) -> None:
    """EditkitError unless the resolved path (`..` collapsed, symlinks followed) lies inside models.folders."""
    if not s.model_folders:
        raise EditkitError(f"model paths are not open to visitors from other machines, only hub ids "
                           f"({s.cite('models.folders')})")
    try:
        real = Path(name).expanduser().resolve()
        roots = [Path(f).expanduser().resolve() for f in s.model_folders]
    except (OSError, ValueError, RuntimeError):
        real, roots = None, []
    if real is None or not any(real == r or r in real.parents for r in roots):
        raise EditkitError(f"{_shown(name)} is not inside the folders this server opens to visitors "
                           f"({s.cite('models.folders')})")


def _no_custom_code(name: str, visitor: Visitor, s: Settings) -> None:
    """EditkitError for a model folder that ships its own Python code (it would need trust_remote_code)."""
    folder = Path(name).expanduser()
    if not folder.is_dir():
        return
    code = sorted(p.name for p in folder.glob("*.py"))
    try:
        auto_map = "auto_map" in json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        auto_map = False
    if code or auto_map:
        what = ", ".join(code[:3]) if code else "config.json's auto_map"
        allowed_to = "tick trust_remote_code to load it" if may_trust(visitor, s) else \
            f"trust_remote_code is off for {visitor.describe()} ({s.cite('models.trust_remote_code')})"
        raise EditkitError(f"{_shown(name)} brings its own Python code ({what}), which would run on this "
                           f"server; {allowed_to}")
