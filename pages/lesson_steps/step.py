"""What a step of the lesson is, for the registry: its number, its title and how it draws itself."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from editkit.lesson.pack import Pack


@dataclass(frozen=True)
class Step:
    """One step of the lesson. `draw(pack, fid, fact)` draws the step for a fact of the pack: its question,
    the reveal, the explanation and "try your own". `heading(pack, fact)` gives a title of this pack's or
    fact's own, or None for `title`."""

    number: int
    title: str
    draw: Callable[[Pack, str, dict], None]
    heading: Callable[[Pack, dict], str | None] | None = None

    def title_for(self, pack: Pack, fact: dict | None) -> str:
        own = self.heading(pack, fact or {}) if self.heading is not None else None
        return own or self.title
