"""Configured caps on the work one request may ask for (EDITKIT_LIMITS), apart from the job queue that enforces
`jobs` and `waiting` (editkit/runtime/jobs.py): the library checks prompts and sizes against them wherever it runs.

Every value a user chooses that multiplies the work of one job has a cap: prompt tokens (also enforced by
tokens.check_prompt for every prompt), noise samples of a trace, requests per edit batch, facts averaged,
generated tokens, sequential edits, corpus positions and index tokens of the memory analyses. `jobs` is how many
long jobs compute at once on the server and `waiting` how many may queue behind them. The defaults suit a 2-core
machine; `EDITKIT_LIMITS` overrides any of them with a JSON object (or the path of a JSON file), e.g.
`EDITKIT_LIMITS='{"samples": 20, "jobs": 4}'`. Unknown keys or values that are not positive integers are errors.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from .errors import EditkitError

ENV = "EDITKIT_LIMITS"


@dataclass(frozen=True)
class Limits:
    """Caps on one session's work (see module docstring); `jobs` and `waiting` bound the whole server."""

    prompt_tokens: int = 512  # tokens of any one prompt (the model's own context limit also applies)
    samples: int = 50  # noise samples of a causal trace (rows of every corrupted run)
    batch: int = 10  # requests edited at once
    facts: int = 200  # facts averaged (average indirect effect, similarity curves)
    new_tokens: int = 60  # generated tokens per generation
    sequential: int = 20  # edits of a sequential-editing run
    positions: int = 1000  # corpus positions of the layer-level memory analyses
    index_tokens: int = 200_000  # corpus tokens of a trigger index
    jobs: int = 2  # long jobs computing at once on the server
    waiting: int = 30  # long jobs that may wait for a turn

    LABELS = {"prompt_tokens": "prompt tokens", "samples": "noise samples", "batch": "requests in one batch",
              "facts": "facts", "new_tokens": "generated tokens", "sequential": "sequential edits",
              "positions": "corpus positions", "index_tokens": "index tokens", "jobs": "parallel jobs",
              "waiting": "waiting jobs"}

    def check(self, **values) -> None:
        """EditkitError for the first value over its cap, e.g. check(samples=80)."""
        for key, value in values.items():
            cap = getattr(self, key, None)
            if not isinstance(cap, int):
                raise EditkitError(f"no limit named {key!r}; limits are {', '.join(self.names())}")
            if value is not None and value > cap:
                raise EditkitError(f"{value:,} {self.LABELS[key]} is over this server's limit of {cap:,} "
                                   f"(set by {ENV})")

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def to_dict(self) -> dict:
        return asdict(self)


def parse_limits(text: str | None) -> Limits:
    """Limits from a JSON object, or from the JSON file a path names; empty or None gives the defaults."""
    text = (text or "").strip()
    if not text:
        return Limits()
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
    if not isinstance(raw, dict):
        raise EditkitError(f"{ENV} must be a JSON object like {{\"samples\": 20}}")
    unknown = sorted(set(raw) - set(Limits.names()))
    if unknown:
        raise EditkitError(f"{ENV}: unknown limit(s) {', '.join(unknown)}; known: {', '.join(Limits.names())}")
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise EditkitError(f"{ENV}: {key} must be a positive integer, not {value!r}")
    return Limits(**raw)


_parsed: dict[str, Limits] = {}


def limits() -> Limits:
    """The configured limits (EDITKIT_LIMITS is read on every call; each distinct value is parsed once)."""
    text = os.environ.get(ENV, "")
    hit = _parsed.get(text)
    if hit is None:
        hit = _parsed[text] = parse_limits(text)
    return hit
