"""The lesson's steps in order: each step's module declares its `STEP` (number, title, how it draws itself);
the page draws the one picked. A new step is a module here and one line in `MODULES`."""
from __future__ import annotations

from pages.lesson_steps import (
                                bleed,
                                edit,
                                lens,
                                lifelong,
                                memories,
                                methods,
                                retrace,
                                ripple,
                                sweep,
                                trace,
                                windows,
)
from pages.lesson_steps.step import Step

MODULES = (lens, trace, windows, memories, edit, retrace, bleed, methods, sweep, lifelong, ripple)
STEPS: dict[int, Step] = {m.STEP.number: m.STEP for m in MODULES}
assert list(STEPS) == list(range(1, len(MODULES) + 1)), "the steps are numbered 1..n in MODULES' order"
