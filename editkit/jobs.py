"""Fair, bounded work when one server runs a class: per-session limits, long jobs with progress and cancellation, and
a queue that lets only a few long jobs compute at once.

    LIMITS = limits()                                   # the configured caps (EDITKIT_LIMITS, see below)
    LIMITS.check(samples=20, batch=3)                   # EditkitError naming the cap when a value is over it
    job = Job("causal trace", owner=session_id, on_progress=show)
    with QUEUE.slot(job, on_wait=lambda ahead, running: ...):   # first come, first served
        result = trace(..., progress=job.progress)      # job.progress raises Cancelled after job.cancel()

Limits. Every value a user chooses that multiplies the work of one job has a cap: prompt tokens (also enforced by
text.check_prompt for every prompt), noise samples of a trace, requests per edit batch, facts averaged,
generated tokens, sequential edits, corpus positions and index tokens of the memory analyses. `jobs` is how many
long jobs compute at once on the server and `waiting` how many may queue behind them. The defaults suit a 2-core
machine; `EDITKIT_LIMITS` overrides any of them with a JSON object (or the path of a JSON file), e.g.
`EDITKIT_LIMITS='{"samples": 20, "jobs": 4}'`. Unknown keys or values that are not positive integers are errors.

Jobs. A long computation runs as a Job: the library's `progress(fraction, message)` callbacks go to
`job.progress`, which records them, forwards them (a page draws a progress bar) and raises `Cancelled` once
`job.cancel()` was called, so a job stops at its next progress step and every `with` block it was in (edits,
hooks, cache writes) unwinds cleanly. Short computations (a next-token prediction) never queue, and a running
long job computes at a lower CPU priority (Linux: its thread's nice value is raised to JOB_NICENESS while it runs,
and the threads torch starts for it inherit that), so a student's prediction stays quick while traces and edits
fill the cores.
"""
from __future__ import annotations

import json
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

from .errors import EditkitError

ENV = "EDITKIT_LIMITS"
JOB_NICENESS = 10  # CFS weight 110 against 1024 for a normal thread: predictions win the CPU over long jobs


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


class Cancelled(EditkitError):
    """The job was cancelled by its owner."""


@dataclass
class Job:
    """One long computation: its name, owner (a session), progress, state and cancel flag."""

    name: str
    owner: str = ""
    on_progress: Callable[[float, str], None] | None = None
    fraction: float = 0.0
    message: str = ""
    state: str = "new"  # new, waiting, running, done, cancelled, failed

    def __post_init__(self):
        self._cancel = threading.Event()
        self.admitted = self.started = self.finished = None

    def cancel(self) -> None:
        """Ask the job to stop: its next progress step (or its wait for a turn) raises Cancelled."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def check(self) -> None:
        if self._cancel.is_set():
            raise Cancelled(f"{self.name} was cancelled")

    def progress(self, fraction: float = 0.0, message: str = "") -> None:
        """The callback for the library's `progress(fraction, message)`: record, stop if cancelled, forward."""
        self.check()
        self.fraction = min(max(float(fraction), 0.0), 1.0) if fraction == fraction else self.fraction
        self.message = str(message)
        if self.on_progress is not None:
            self.on_progress(self.fraction, self.message)

    def summary(self) -> dict:
        return {"name": self.name, "owner": self.owner, "state": self.state, "fraction": self.fraction,
                "message": self.message}


@contextmanager
def background_priority(niceness: int = JOB_NICENESS):
    """Run a block at a lower CPU priority: this thread's nice value is raised to `niceness` (Linux, per thread)
    and put back afterwards where the system allows it (lowering it again needs privileges; a Streamlit script
    thread ends with its run anyway). Elsewhere, or when not allowed, the block runs unchanged."""
    tid = threading.get_native_id()
    try:
        before = os.getpriority(os.PRIO_PROCESS, tid)
        if before < niceness:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
    except (AttributeError, OSError):
        before = None
    try:
        yield
    finally:
        if before is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, before)
            except OSError:
                pass


class JobQueue:
    """At most `limits().jobs` long jobs compute at once; the others wait in arrival order (first come, first
    served). A waiting job sees how many jobs are ahead of it and can be cancelled while it waits."""

    def __init__(self, slots: int | None = None, poll: float = 0.25):
        self._slots = slots
        self.poll = poll
        self._cond = threading.Condition()
        self._running: list[Job] = []
        self._waiting: list[Job] = []

    @property
    def slots(self) -> int:
        return self._slots if self._slots is not None else limits().jobs

    def snapshot(self) -> dict:
        """{"running": [...], "waiting": [...]} job summaries, for a status view."""
        with self._cond:
            return {"running": [j.summary() for j in self._running], "waiting": [j.summary() for j in self._waiting]}

    def ahead(self, job: Job) -> int | None:
        """Jobs waiting ahead of `job` (0: it is next), or None when it is not waiting."""
        with self._cond:
            return self._waiting.index(job) if job in self._waiting else None

    def _admit(self, job: Job) -> bool:
        if self._waiting[0] is job and len(self._running) < self.slots:  # only the first in line may start
            self._waiting.pop(0)
            self._running.append(job)
            job.admitted = time.monotonic()  # under the lock: admissions are strictly ordered
            self._cond.notify_all()  # the next in line may take another free slot at once
            return True
        return False

    @contextmanager
    def slot(self, job: Job, on_wait: Callable[[int, int], None] | None = None):
        """Wait for a turn (on_wait(jobs ahead, jobs running) is called while waiting, at most every `poll`
        seconds, and may raise to give up), run the block, and free the slot whatever happens."""
        with self._cond:
            if len(self._waiting) >= limits().waiting:
                raise EditkitError(f"the server is busy: {len(self._running)} jobs running and "
                                   f"{len(self._waiting)} waiting; try again in a minute")
            self._waiting.append(job)
            job.state = "waiting"
        try:
            while True:
                with self._cond:
                    if self._admit(job):
                        break
                    ahead, running = self._waiting.index(job), len(self._running)
                if on_wait is not None:
                    on_wait(ahead, running)
                job.check()
                with self._cond:
                    self._cond.wait(self.poll)
        except BaseException:
            with self._cond:
                if job in self._waiting:
                    self._waiting.remove(job)
                self._cond.notify_all()
            job.state = "cancelled" if job.cancelled else "failed"
            raise
        job.state, job.started = "running", time.time()
        try:
            yield job
            job.state = "done"
        except BaseException:
            job.state = "cancelled" if job.cancelled else "failed"
            raise
        finally:
            job.finished = time.time()
            with self._cond:
                self._running.remove(job)
                self._cond.notify_all()


QUEUE = JobQueue()


def run(job: Job, fn: Callable[[Callable[[float, str], None]], object], queue: JobQueue = QUEUE,
        on_wait: Callable[[int, int], None] | None = None):
    """fn(job.progress) in a queue slot, at background priority; returns its result (Cancelled when the job was
    cancelled)."""
    with queue.slot(job, on_wait), background_priority():
        job.check()
        return fn(job.progress)
