"""OpenMP's spin count, set before torch loads (imported first by editkit/__init__.py; no torch here).

GNU libgomp (torch's OpenMP) spins 300,000 times at every barrier before a thread sleeps: beside a process of another
session (whose share of the CPU no niceness lowers) a thread spinning while its partner is descheduled stalls every
parallel region, many times over. 10,000 spins keep the idle speed and avoid most of the stall (the choice measured:
docs/results/speed.md, "Beside other work"). libgomp reads the variable once, when torch loads it; a value the user
set is kept.
"""
from __future__ import annotations

import os
import sys

SPIN = "10000"
# torch (so libgomp) loaded before editkit, with no spin count of the user's: setting one now changes nothing
TOO_LATE = "torch" in sys.modules and "GOMP_SPINCOUNT" not in os.environ
os.environ.setdefault("GOMP_SPINCOUNT", SPIN)


def spin_count() -> str | None:
    """The spin count torch's OpenMP runs with: the variable's value, None for libgomp's default (torch was loaded
    before editkit set it)."""
    return None if TOO_LATE else os.environ.get("GOMP_SPINCOUNT")
