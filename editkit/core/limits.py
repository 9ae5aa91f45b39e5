"""Configured caps on the work one request may ask for, apart from the job queue that enforces `jobs`, `waiting`,
`session_jobs` and `visitor_jobs` (editkit/runtime/jobs.py): the library checks prompts and sizes against them
wherever it runs.

Every value a user chooses that multiplies the work of one job has a cap: prompt tokens (also enforced by
tokens.check_prompt for every prompt), noise samples of a trace, requests per edit batch, facts averaged,
generated tokens, sequential edits, corpus positions and index tokens of the memory analyses, and how far a loaded
patch may move a weight matrix. `jobs` is how many long jobs compute at once on the server, `waiting` how many may
queue behind them, `session_jobs` and `visitor_jobs` how many one browser session and one visitor (every session
from one address other than the server's own machine) may have running or waiting. The defaults suit a 2-core
machine. The [limits] table of the settings file (editkit/core/settings.py) and `EDITKIT_LIMITS` (a JSON object
or the path of a JSON file, merged over the table) override any of them, e.g.
`EDITKIT_LIMITS='{"samples": 20, "jobs": 4}'`. Unknown keys or values that are not positive integers are errors.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from .errors import EditkitError

ENV = "EDITKIT_LIMITS"


@dataclass(frozen=True)
class Limits:
    """Caps on one session's work (see module docstring); `jobs` and `waiting` bound the whole server. `origin`
    says where a value that is not the default came from ("limits.samples" -> "EDITKIT_LIMITS")."""

    prompt_tokens: int = 512  # tokens of any one prompt (the model's own context limit also applies)
    samples: int = 50  # noise samples of a causal trace (rows of every corrupted run)
    batch: int = 10  # requests edited at once
    facts: int = 200  # facts averaged (average indirect effect, similarity curves)
    new_tokens: int = 60  # generated tokens per generation
    sequential: int = 20  # edits of a sequential-editing run
    positions: int = 1000  # corpus positions of the layer-level memory analyses
    index_tokens: int = 200_000  # corpus tokens of a trigger index
    patch_scale: int = 10  # a loaded patch's ||dW|| at most this many times the weight's own ||W|| (Frobenius)
    jobs: int = 2  # long jobs computing at once on the server
    waiting: int = 30  # long jobs that may wait for a turn
    session_jobs: int = 1  # long jobs one browser session may have running or waiting
    visitor_jobs: int = 3  # long jobs of every session from one address (not this machine's) at once
    origin: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    LABELS = {"prompt_tokens": "prompt tokens", "samples": "noise samples", "batch": "requests in one batch",
              "facts": "facts", "new_tokens": "generated tokens", "sequential": "sequential edits",
              "positions": "corpus positions", "index_tokens": "index tokens",
              "patch_scale": "times the weight's norm", "jobs": "parallel jobs", "waiting": "waiting jobs",
              "session_jobs": "jobs of one session", "visitor_jobs": "jobs of one visitor"}

    def check(self, **values: int | None) -> None:
        """EditkitError for the first value over its cap, e.g. check(samples=80)."""
        for key, value in values.items():
            cap = getattr(self, key, None) if key in self.names() else None
            if not isinstance(cap, int):
                raise EditkitError(f"no limit named {key!r}; limits are {', '.join(self.names())}")
            if value is not None and value > cap:
                raise EditkitError(f"{value:,} {self.LABELS[key]} is over this server's limit of {cap:,} "
                                   f"({self.cite(key)})")

    def cite(self, key: str) -> str:
        """'setting limits.samples = 50, the default': the setting that decides, for a message."""
        return cite(f"limits.{key}", str(getattr(self, key)), self.origin.get(f"limits.{key}"))

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls) if f.name != "origin"]

    def to_dict(self) -> dict[str, int]:
        return {n: getattr(self, n) for n in self.names()}


def cite(key: str, value: str, source: str | None) -> str:
    """How a message names the setting that decided: 'setting limits.jobs = 2, the default', or '..., from
    EDITKIT_LIMITS' (a variable) or '..., from /srv/editkit.toml' (the settings file)."""
    return f"setting {key} = {value}, " + (f"from {source}" if source else "the default")


def check_limit_values(raw: object, where: str = ENV) -> None:
    """EditkitError unless `raw` is a {name: positive int} object of known limits."""
    if not isinstance(raw, dict):
        raise EditkitError(f"{where} must be a JSON object like {{\"samples\": 20}}")
    unknown = sorted(set(raw) - set(Limits.names()))
    if unknown:
        raise EditkitError(f"{where}: unknown limit(s) {', '.join(unknown)}; known: {', '.join(Limits.names())}")
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise EditkitError(f"{where}: {key} must be a positive integer, not {value!r}")


def parse_limits_override(text: str | None) -> dict[str, int]:
    """The limits a JSON object names (or the JSON file a path names): {name: value}; empty or None: {}."""
    text = (text or "").strip()
    if not text:
        return {}
    if not text.startswith(("{", "[")):
        path = Path(text).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise EditkitError(f"{ENV} names no readable JSON file ({path}: {exc.strerror})") from None
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise EditkitError(f"{ENV} is not valid JSON: {exc}") from None
    check_limit_values(raw)
    return dict(raw)

