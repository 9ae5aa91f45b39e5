"""A fact while it is built: the build's countdown and the status students' pages read.

- Clock: progress and time left over a build's units, each with the seconds it is expected to take on this
machine now (timing.rates, with the first-use statistics it computes). The countdown follows the wall clock:
the unit computing counts down from its expected seconds (or from its own progress once it has made some), and
the units still to come are scaled by how much slower or faster the finished ones ran than expected, weighed
against PRIOR seconds of the expectation so that one short part does not swing the whole estimate. - Status:
facts/<id>/building.json, rewritten atomically at every unit's start and end and every HEARTBEAT seconds by a
thread of the build: each unit's parts, the steps they open, its state and expected end, and the build's
heartbeat. A fact whose status has not been rewritten for STALE seconds (the build was killed) is served no
more; a build that stops (cancelled, failed) removes the file itself (Status.close), so its fact disappears at
once."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from ..core.progress import duration, gives_time, time_left
from .pack import BUILDING, step_parts, write_json
from .pack import building_status as status

HEARTBEAT = 5.0  # seconds between two rewrites of a status (a status older than pack.STALE is a build gone)
PRIOR = 30.0  # seconds of expected work counted as measured at the start (the ratio of actual to expected)


class Clock:
    """Progress and time left over units with their expected seconds (`expected`, in order; `labels` for the
    messages). `unit(i)` returns the progress callback of unit i and the call that finishes it."""

    def __init__(self, say, expected: list[float], labels: list[str]):
        self.say, self.expected, self.labels = say, [max(e, 0.1) for e in expected], labels
        self.state = ["waiting"] * len(expected)
        self.spent: list[float | None] = [None] * len(expected)
        self.current: int | None = None
        self.started_at = 0.0
        self.fraction = 0.0
        self.finished_at: dict[int, float] = {}
        self.lock = threading.Lock()

    def ratio(self) -> float:
        """Actual over expected seconds of the units computed so far, PRIOR seconds of the expectation
        counting as on time."""
        done = [(a, e) for a, e, s in zip(self.spent, self.expected, self.state)
                if s == "done" and a is not None]
        return (sum(a for a, _ in done) + PRIOR) / (sum(e for _, e in done) + PRIOR)

    def left_in_current(self, now: float) -> float:
        """Seconds the unit computing has left: from its own progress once it has made some (a tenth, after 3
        s), else its expected seconds (scaled by ratio()) less the time it has run; never under a second."""
        if self.current is None:
            return 0.0
        ran = now - self.started_at
        if self.fraction >= 0.1 and ran >= 3:
            return max(ran * (1 - self.fraction) / self.fraction, 1.0)
        return max(self.expected[self.current] * self.ratio() - ran, 1.0)

    def ends(self, now: float | None = None) -> list[float]:
        """Each unit's expected end (epoch seconds); a finished unit's is when it finished."""
        now = time.time() if now is None else now
        r, at, out = self.ratio(), now, []
        for i, state in enumerate(self.state):
            if state == "done":
                out.append(self.finished_at[i])
                continue
            at += self.left_in_current(now) if i == self.current else self.expected[i] * r
            out.append(at)
        return out

    def left(self, now: float | None = None) -> float:
        now = time.time() if now is None else now
        ends = self.ends(now)
        return max(max(ends, default=now) - now, 0.0)

    def unit(self, i: int):
        """The progress callback for unit i, and finish(computed) to call after it (computed False: it was
        done already, by another process)."""
        with self.lock:
            self.current, self.started_at, self.fraction = i, time.time(), 0.0
            self.state[i] = "computing"
        label = self.labels[i]

        def step(f: float, message: str = "") -> None:
            self.fraction = min(max(f, 0.0), 1.0)
            done = sum(e for e, s in zip(self.expected, self.state) if s == "done")
            done += self.expected[i] * self.fraction
            total = sum(self.expected)
            if gives_time(message):  # a part that says its own time (first-use statistics): what follows it
                rest = self.left() - self.left_in_current(time.time())
                when = "the last part" if rest < 0.5 else f"then about {duration(rest)} for the other parts"
            else:
                when = time_left(self.left())
            self.say(min(done / total, 1.0), f"{label}{': ' + message if message else ''} ({when})")

        def finish(computed: bool) -> None:
            with self.lock:
                self.state[i], self.current = "done", None
                self.finished_at[i] = time.time()
                self.spent[i] = time.time() - self.started_at if computed else None

        return step, finish


class Status:
    """The status file of one fact being built (module docstring): `units` are (the clock's index, what, part
    names, target) of its units still to compute, in the build's order. Rewritten by `write()` and by its
    heartbeat thread until `close()`."""

    def __init__(self, folder: Path, fid: str, key: str,
                 units: list[tuple[int, str, tuple[str, ...], int | None]], methods: list[str], clock: Clock):
        self.path = Path(folder) / "facts" / fid / BUILDING
        self.fid, self.key, self.units, self.methods, self.clock = fid, key, units, methods, clock
        self.started = time.time()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name=f"editkit-building-{fid}", daemon=True)

    def open(self) -> None:
        self.write()
        self.thread.start()

    def write(self) -> None:
        now = time.time()
        with self.clock.lock:
            ends = self.clock.ends(now)
            states = list(self.clock.state)
        rows = []
        for i, what, files, target in self.units:
            rows.append({"what": what, "parts": list(files), "steps": steps_of(files, target, self.methods),
                         "target": target, "state": states[i], "ends": round(ends[i], 1),
                         "expected": round(self.clock.expected[i], 1),
                         "seconds": None if self.clock.spent[i] is None else round(self.clock.spent[i], 1)})
        write_json(self.path, {"fact": self.fid, "key": self.key, "pid": os.getpid(), "started": self.started,
                               "heartbeat": now, "units": rows})

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT):
            try:
                self.write()
            except Exception:  # noqa: BLE001 - a missed beat is retried; a build that is gone goes stale
                pass

    def close(self) -> None:
        """The build of this fact is over (published, cancelled or failed): its status goes."""
        self.stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=2 * HEARTBEAT)
        try:
            self.path.unlink()
        except OSError:
            pass


def steps_of(files, target: int | None, methods: list[str]) -> list[int]:
    """The steps whose parts include one of `files` (for new target number `target`; None: the fact's own)."""
    t = target or 0
    return [n for n in range(1, 12) if set(files) & set(step_parts(n, t, methods))]


def opens_in(found: dict, parts: list[str], now: float | None = None) -> float | None:
    """Seconds until every one of `parts` is expected to be written, from a status; None when a part is not
    one this build computes."""
    now = time.time() if now is None else now
    ends = {p: u["ends"] for u in found.get("units", []) for p in u["parts"]}
    if any(p not in ends for p in parts):
        return None
    return max([ends[p] - now for p in parts] + [0.0])


def find(folder: Path, key: str) -> dict | None:
    """The live status of the fact with `key` (facts.LessonFact.key) being built in the pack `folder`, or
    None."""
    for path in (Path(folder) / "facts").glob(f"*/{BUILDING}"):
        found = status(folder, path.parent.name)
        if found is not None and found.get("key") == key:
            return found
    return None
