"""What a step of the lesson is, for the registry: its number, its title and how it draws itself."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from editkit.lesson.pack import TARGETED, Pack


@dataclass(frozen=True)
class Step:
    """One step of the lesson. `draw(pack, fid, fact, target)` draws the step for a fact of the pack: its
    question, the reveal, the explanation and "try your own"; `target` is the new target number picked above
    it for the steps about an edit (`targeted`), else None. `heading(pack, fact)` gives a title of this pack's
    or fact's own, or None for `title`. The parts of the pack a step shows are pack.step_parts(number, ...).
    """

    number: int
    title: str
    draw: Callable[[Pack, str, dict, int | None], None]
    heading: Callable[[Pack, dict], str | None] | None = None

    @property
    def targeted(self) -> bool:
        """Whether the step is about an edit to one of the fact's new targets (the page picks it above)."""
        return self.number in TARGETED

    def title_for(self, pack: Pack, fact: dict | None) -> str:
        own = self.heading(pack, fact or {}) if self.heading is not None else None
        return own or self.title
