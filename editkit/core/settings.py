"""The operator's settings of a served editkit: one source, safe by default.

    s = settings()                      # editkit.toml (or the file $EDITKIT_CONFIG names) + EDITKIT_* variables
    s.free_models, s.cite("models.free")   # "local", 'models.free = "local" (default)'

A TOML file (`$EDITKIT_CONFIG`, else `editkit.toml` in the server's working directory, if there is one) with the
tables [models], [uploads], [memory], [teacher] and [limits]; the environment variables EDITKIT_LIMITS (merged over
[limits]), EDITKIT_MEMORY_BUDGET and EDITKIT_TEACHER_PASSPHRASE override the file. Every value has a default that
is safe for a server with visitors: they pick only the shipped models, only a browser on the server's own machine
("local") may type other model ids or paths, trust_remote_code is never set from the page, uploads are capped per
kind, and teacher mode without a passphrase is for a local browser only. Unknown keys and wrong types are
EditkitErrors naming the key. The file is re-read when it changes (its modification time), so an operator's edit
takes effect at the next page run. `cite(key)` says where a value came from, for every refusal's message.
"""
from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import EditkitError
from .limits import ENV as LIMITS_ENV
from .limits import Limits, check_limit_values, cite, parse_limits_override

CONFIG_ENV = "EDITKIT_CONFIG"
DEFAULT_FILE = "editkit.toml"
BUDGET_ENV = "EDITKIT_MEMORY_BUDGET"
TEACHER_ENV = "EDITKIT_TEACHER_PASSPHRASE"
WHO = ("nobody", "local", "anyone")  # who may do a thing: no one, a browser on this machine, every visitor
MB = 1 << 20


@dataclass(frozen=True)
class Settings:
    """What the operator set (see the module docstring); `sources` maps "table.key" to where each value came from
    (the file's path or an environment variable; absent: the default)."""

    models: tuple[str, ...] = ("shipped",)  # names visitors may pick; "shipped" and "tiny" stand for those lists
    free_models: str = "local"  # who may type a hub id, a folder or a GGUF file path
    model_folders: tuple[str, ...] = ()  # with free = "anyone": the folders a non-local visitor's path must be in
    trust_remote_code: str = "nobody"  # who may tick trust_remote_code ("nobody" or "local")
    patch_mb: float = 100.0  # the largest patch (.safetensors) a visitor may upload
    records_mb: float = 20.0  # the largest records file (.json / .jsonl) a visitor may upload
    memory_budget: str = "50%"  # working memory of the long jobs at once: a share of the free memory, or "6 GB"
    teacher_passphrase: str = field(default="", repr=False)
    limits: Limits = Limits()
    sources: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    path: str | None = None  # the settings file read, if any

    KEYS = {  # "table.key" -> (field, type check, what it is)
        "models.allowed": ("models", "list", "models visitors may pick"),
        "models.free": ("free_models", "who", "who may load other models (hub ids, folders, GGUF files)"),
        "models.folders": ("model_folders", "list", "folders whose models any visitor may load (free = anyone)"),
        "models.trust_remote_code": ("trust_remote_code", "who2", "who may run a model's own Python code"),
        "uploads.patch_mb": ("patch_mb", "mb", "largest patch upload (MB)"),
        "uploads.records_mb": ("records_mb", "mb", "largest records upload (MB)"),
        "memory.budget": ("memory_budget", "budget", "working memory of the long jobs at once"),
        "teacher.passphrase": ("teacher_passphrase", "str", "passphrase of teacher mode"),
    }

    def cite(self, key: str) -> str:
        """'setting models.free = "local", the default' (or '..., from /srv/editkit.toml'): which setting decided,
        for a message."""
        return cite(key, self.shown(key), self.sources.get(key))

    def shown(self, key: str) -> str:
        """A setting's value as TOML text (the passphrase only as set or not)."""
        if key.startswith("limits."):
            return str(getattr(self.limits, key.split(".", 1)[1]))
        value = getattr(self, self.KEYS[key][0])
        return ("(set)" if value else "(not set)") if key == "teacher.passphrase" else _toml(value)

    def who_may(self, key: str, local: bool) -> bool:
        """Whether a visitor (local: a browser on this machine) may do what the who-setting `key` governs."""
        who = getattr(self, self.KEYS[key][0])
        return who == "anyone" or (who == "local" and local)

    def budget_bytes(self, free: int, reserved: int = 0) -> int:
        """The long jobs' memory budget in bytes: a share of the memory free for them (`free` now plus what the
        running jobs reserved, since their memory is no longer free), or the fixed size."""
        share, size = parse_budget(self.memory_budget)
        return int(size) if size is not None else int(share * (free + reserved))

    def upload_cap(self, kind: str) -> tuple[int, str]:
        """(bytes, "uploads.<kind>_mb") for an upload kind ("patch", "records")."""
        key = f"uploads.{kind}_mb"
        if key not in self.KEYS:
            raise EditkitError(f"no upload kind {kind!r}")
        return int(getattr(self, self.KEYS[key][0]) * MB), key

    def table(self) -> list[dict[str, str]]:
        """Every setting in force: {"setting", "value", "from", "what"} (the Server box, the manual)."""
        rows = [{"setting": k, "value": self.shown(k), "from": self.sources.get(k, "default"), "what": what}
                for k, (_, _, what) in self.KEYS.items()]
        rows += [{"setting": f"limits.{n}", "value": str(getattr(self.limits, n)),
                  "from": self.sources.get(f"limits.{n}", "default"), "what": Limits.LABELS[n]}
                 for n in Limits.names()]
        return rows


def _toml(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


_BUDGET = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%|gb|mb|gib|mib)\s*$", re.IGNORECASE)


def parse_budget(text: str) -> tuple[float, float | None]:
    """(share, None) for a share of the free memory ("50%" -> (0.5, None)), (0.0, bytes) for a fixed size ("6 GB"
    -> (0.0, 6e9))."""
    m = _BUDGET.match(str(text))
    if not m:
        raise EditkitError(f'memory.budget must be a share like "50%" or a size like "6 GB", not {text!r}')
    value, unit = float(m.group(1)), m.group(2).lower()
    if unit == "%":
        if not 0 < value <= 100:
            raise EditkitError(f"memory.budget must be a share between 0% and 100%, not {text!r}")
        return value / 100, None
    scale = {"gb": 1e9, "mb": 1e6, "gib": 1 << 30, "mib": MB}[unit]
    if value <= 0:
        raise EditkitError(f"memory.budget must be positive, not {text!r}")
    return 0.0, value * scale


def _check(key: str, kind: str, value: Any) -> Any:
    """The value of one setting in its field's type, or an EditkitError naming the key."""
    if kind == "list":
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise EditkitError(f"{key} must be a list of names, like [\"shipped\"]")
        return tuple(v.strip() for v in value)
    if kind in ("who", "who2"):
        allowed = WHO if kind == "who" else ("nobody", "local")
        if value not in allowed:
            raise EditkitError(f"{key} must be one of {', '.join(repr(w) for w in allowed)}, not {value!r}")
        return value
    if kind == "mb":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 10_000:
            raise EditkitError(f"{key} must be a number of megabytes between 0 and 10000, not {value!r}")
        return float(value)
    if kind == "budget":
        parse_budget(value)
        return str(value).strip()
    if not isinstance(value, str):
        raise EditkitError(f"{key} must be a string")
    return value


def config_path() -> Path | None:
    """The settings file: $EDITKIT_CONFIG (which must exist), else ./editkit.toml when there is one."""
    named = os.environ.get(CONFIG_ENV, "").strip()
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise EditkitError(f"{CONFIG_ENV} names no settings file ({path})")
        return path
    path = Path(DEFAULT_FILE)
    return path.resolve() if path.is_file() else None


def parse_settings(text: str = "", where: str = DEFAULT_FILE,
                   env: Mapping[str, str] | None = None) -> Settings:
    """Settings from a TOML text (`where` names it in messages and sources) and the environment `env`."""
    env = os.environ if env is None else env
    try:
        raw = tomllib.loads(text) if text.strip() else {}
    except tomllib.TOMLDecodeError as exc:
        raise EditkitError(f"{where} is not valid TOML: {exc}") from None
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    known = {k.split(".")[0] for k in Settings.KEYS} | {"limits"}
    for table, body in raw.items():
        if table not in known or not isinstance(body, dict):
            raise EditkitError(f"{where}: unknown table [{table}]; known: {', '.join(sorted(known))}")
        if table == "limits":
            continue
        for key, value in body.items():
            full = f"{table}.{key}"
            if full not in Settings.KEYS:
                raise EditkitError(f"{where}: unknown setting {full}; known: {', '.join(Settings.KEYS)}")
            name, kind, _ = Settings.KEYS[full]
            values[name], sources[full] = _check(full, kind, value), where
    lim = dict(raw.get("limits", {}))
    check_limit_values(lim, f"{where} [limits]")
    sources |= {f"limits.{k}": where for k in lim}
    over = parse_limits_override(env.get(LIMITS_ENV, ""))
    lim |= over
    sources |= {f"limits.{k}": LIMITS_ENV for k in over}
    for var, full in ((BUDGET_ENV, "memory.budget"), (TEACHER_ENV, "teacher.passphrase")):
        if env.get(var, "").strip():
            name, kind, _ = Settings.KEYS[full]
            values[name], sources[full] = _check(var, kind, env[var].strip()), var
    origin = {k: v for k, v in sources.items() if k.startswith("limits.")}
    return Settings(**values, limits=Limits(**lim, origin=origin), sources=sources,
                    path=where if text.strip() else None)


_cache: dict[tuple[str, int | None, tuple[str, ...]], Settings] = {}


def settings() -> Settings:
    """The settings in force: the file (re-read when its modification time changes) and the environment."""
    path = config_path()
    stamp = path.stat().st_mtime_ns if path else None
    env = tuple(os.environ.get(v, "") for v in (LIMITS_ENV, BUDGET_ENV, TEACHER_ENV))
    key = (str(path), stamp, env)
    hit = _cache.get(key)
    if hit is None:
        text = path.read_text(encoding="utf-8") if path else ""
        if len(_cache) > 16:
            _cache.clear()
        hit = _cache[key] = parse_settings(text, str(path) if path else DEFAULT_FILE)
    return hit


def limits() -> Limits:
    """The configured limits: the settings file's [limits] with EDITKIT_LIMITS over it (both re-read when they
    change)."""
    return settings().limits


def names() -> list[str]:
    """Every setting's "table.key", the limits included."""
    return [*Settings.KEYS, *(f"limits.{n}" for n in Limits.names())]

