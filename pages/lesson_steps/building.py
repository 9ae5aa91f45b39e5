"""A fact being built, as the Lesson page shows it: a step whose parts are still computed says when it opens
and opens by itself (a fragment that reruns every few seconds), the sidebar's fact list follows the facts the
teacher adds (and drops one whose build stopped), and the teacher sees each part's time left while the fact is
added."""
from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from editkit.core.progress import duration
from editkit.lesson import building
from pages.lesson_steps.shared import current_pack

WATCH_SECONDS = 4  # how often a waiting step and the fact list look for what a build wrote


def opens_words(found: dict | None, missing: list[str]) -> str:
    """When the parts `missing` are expected, in words, from the build's status."""
    seconds = building.opens_in(found, missing) if found else None
    if seconds is None:
        return "when the teacher's build computes its parts"
    return "any moment now" if seconds < 3 else f"in about {duration(seconds)}"


@st.fragment(run_every=WATCH_SECONDS)
def wait_for_step(fid: str, n: int, target: int) -> None:
    """The note a student reads while step n of a fact being built waits for its parts; the whole page reruns
    (and draws the step) once they are written."""
    pack = current_pack()
    missing = pack.missing_for(fid, n, target)
    if not missing or fid in pack.fact_ids:
        st.rerun()
    found = building.status(pack.folder, fid)
    if found is None:
        st.warning("The teacher's build of this fact stopped before this step's results were computed: the "
                   "fact is withdrawn. Pick another fact in the sidebar.")
        return
    parts = f"{len(missing)} part{'s' if len(missing) > 1 else ''}"
    st.info(f"**Step {n} opens {opens_words(found, missing)}.** Your teacher is adding this fact: its first "
            "steps are open already, and each later step opens here by itself as the server computes its "
            f"results ({parts} still to come); meanwhile the earlier steps are one click away.")


@st.fragment(run_every=WATCH_SECONDS)
def watch_facts(built: tuple[str, ...], building: tuple[str, ...]) -> None:
    """Reruns the page when the facts students may open change (a fact being built, built, or withdrawn), so
    the sidebar's list follows the teacher's builds without a click."""
    pack = current_pack()
    if (tuple(pack.fact_ids), tuple(pack.building_ids())) != (built, building):
        st.rerun()


def parts_table(found: dict, now: float | None = None) -> pd.DataFrame:
    """The teacher's view of a fact being built: each part, the steps it opens, and its time (spent, or left).
    """
    now = time.time() if now is None else now
    rows = []
    for u in found.get("units", []):
        left = max(u["ends"] - now, 0.0)
        if u["state"] == "done":
            when = "done" + (f" in {u['seconds']:.0f} s" if u.get("seconds") is not None else "")
        elif u["state"] == "computing":
            when = f"computing: {duration(left)} left" if left >= 1 else "computing: finishing"
        else:
            when = f"waiting: done {duration(left)} from now"
        rows.append({"part": u["what"], "opens step": ", ".join(map(str, u["steps"])) or "-", "time": when})
    return pd.DataFrame(rows)
