"""Long jobs of a served app: progress and cancellation, and a queue that lets only a few compute at once.

    job = Job("causal trace", owner=session_id, on_progress=show)
    with QUEUE.slot(job, on_wait=lambda ahead, running: ...):   # first come, first served
        result = trace(..., progress=job.progress)      # job.progress raises Cancelled after job.cancel()

A long computation runs as a Job: the library's `progress(fraction, message)` callbacks go to
`job.progress`, which records them, forwards them (a page draws a progress bar) and raises `Cancelled` once
`job.cancel()` was called, so a job stops at its next progress step and every `with` block it was in (edits,
hooks, cache writes) unwinds cleanly. Short computations (a next-token prediction) never queue, and a running
long job computes at a lower CPU priority (Linux: its thread's nice value is raised to JOB_NICENESS while it runs,
and the threads torch starts for it inherit that), so a student's prediction stays quick while traces and edits
fill the cores; a job that a person prepares a class with and waits on (a teacher adding a fact) keeps the normal
priority instead (`Job.niceness` 0), so it is not starved by other work on the machine. How many jobs compute and
wait at once is configuration (editkit/core/limits.py: `jobs`, `waiting`), and so is how many one session and one
visitor may hold (`session_jobs`, `visitor_jobs`).

Memory: each job declares its working memory (`Job.memory`, bytes: what it allocates beyond the loaded weights,
estimated by the library that runs it), and the queue admits a job only while the running jobs' declared memory
plus its own fits in the budget (editkit/core/settings.py memory.budget: by default half of the memory free for
jobs, i.e. what is free now plus what the running jobs reserved). A job that needs more than the whole budget is
refused before it waits, with the numbers. The first job in line is admitted whenever nothing runs, so a budget
that shrank (another program took memory) delays jobs but never stops the queue.
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

from ..core.errors import Cancelled, EditkitError
from ..core.progress import time_left
from ..core.settings import limits, settings
from ..model.ram import available, gigabytes

JOB_NICENESS = 10  # CFS weight 110 against 1024 for a normal thread: predictions win the CPU over long jobs


@dataclass
class Job:
    """One long computation: its name, owner (a session), progress, state and cancel flag."""

    name: str
    owner: str = ""  # the session that started it
    on_progress: Callable[[float, str], None] | None = None
    fraction: float = 0.0
    message: str = ""
    state: str = "new"  # new, waiting, running, done, cancelled, failed
    memory: int = 0  # declared working memory in bytes (beyond the loaded weights)
    address: str | None = None  # the visitor's address when not on the server's machine (visitor_jobs)
    niceness: int = JOB_NICENESS  # the nice value it computes at (0: the normal priority)

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

    def left(self, now: float | None = None) -> str | None:
        """The time left, extrapolated from the time spent so far and the fraction done (time_left), once
        there is enough to go on (5% and 10 s); None before. A job whose messages carry their own estimate keeps
        those (the page shows this one only when the message has none)."""
        if self.started is None or self.fraction < 0.05:
            return None
        spent = (now or time.time()) - self.started
        if spent < 10:
            return None
        return time_left(spent * (1 - self.fraction) / self.fraction)

    def summary(self) -> dict:
        return {"name": self.name, "owner": self.owner, "state": self.state, "fraction": self.fraction,
                "message": self.message, "memory": self.memory}


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


def free_memory() -> int:
    """Bytes free for jobs on the device they compute on (RAM, or the first GPU's memory)."""
    import torch

    return available(torch.device("cuda" if torch.cuda.is_available() else "cpu"))[0]


class JobQueue:
    """At most `limits().jobs` long jobs compute at once, within the memory budget; the others wait in arrival
    order (first come, first served). A waiting job sees how many jobs are ahead of it and can be cancelled while
    it waits. `budget(reserved)`: the memory budget in bytes given the running jobs' reservation (default: the
    settings' memory.budget over the free memory)."""

    def __init__(self, slots: int | None = None, poll: float = 0.25,
                 budget: Callable[[int], int] | None = None):
        self._slots = slots
        self.poll = poll
        self._budget = budget
        self._cond = threading.Condition()
        self._running: list[Job] = []
        self._waiting: list[Job] = []

    @property
    def slots(self) -> int:
        return self._slots if self._slots is not None else limits().jobs

    def budget(self, reserved: int | None = None) -> int:
        """The jobs' memory budget in bytes now (`reserved`: the running jobs' declared memory)."""
        reserved = self.reserved() if reserved is None else reserved
        return self._budget(reserved) if self._budget else settings().budget_bytes(free_memory(), reserved)

    def reserved(self) -> int:
        """The running jobs' declared working memory in bytes."""
        with self._cond:
            return sum(j.memory for j in self._running)

    def snapshot(self) -> dict:
        """{"running": [...], "waiting": [...]} job summaries and the memory "reserved" of the "budget" (bytes),
        for a status view."""
        with self._cond:
            running, waiting = [j.summary() for j in self._running], [j.summary() for j in self._waiting]
        reserved = sum(j["memory"] for j in running)
        return {"running": running, "waiting": waiting, "reserved": reserved, "budget": self.budget(reserved)}

    def ahead(self, job: Job) -> int | None:
        """Jobs waiting ahead of `job` (0: it is next), or None when it is not waiting."""
        with self._cond:
            return self._waiting.index(job) if job in self._waiting else None

    def supersede(self, owner: str) -> list[Job]:
        """Cancel every job of `owner` (a session) still running or waiting, and return them: a session runs one
        script at a time, so its job still here when it starts another belongs to a script run that was stopped (a
        Cancel or any other click: Streamlit starts the new run at once, while the old one computes on until its
        next progress step). The new job then waits for them to stop (_stopping), visibly, instead of being refused
        for the session's quota."""
        with self._cond:
            mine = [j for j in self._running + self._waiting if owner and j.owner == owner]
        for j in mine:
            j.cancel()
        return mine

    def _stopping(self, job: Job) -> Job | None:
        """A cancelled job of `job`'s owner that has not stopped yet (it holds the session's slot until its next
        progress step), or None."""
        return next((j for j in self._running + self._waiting
                     if job.owner and j is not job and j.owner == job.owner and j.cancelled), None)

    def _admit(self, job: Job) -> bool:
        old = self._stopping(job)
        if old is not None:
            job.message = f"waiting for your cancelled job ({old.name}) to stop"
            return False
        line = [j for j in self._waiting if self._stopping(j) is None]  # a job held back lets the others pass
        if line[0] is not job or len(self._running) >= self.slots:  # only the first in line may start
            return False
        reserved = sum(j.memory for j in self._running)
        budget = self.budget(reserved) if self._running and job.memory else None
        if budget is not None and reserved + job.memory > budget:
            job.message = (f"waiting for memory: the running jobs hold {gigabytes(reserved)} of the jobs' "
                           f"{gigabytes(budget)}, this one needs {gigabytes(job.memory)}")
            return False
        self._waiting.remove(job)
        self._running.append(job)
        job.admitted = time.monotonic()  # under the lock: admissions are strictly ordered
        job.message = ""
        self._cond.notify_all()  # the next in line may take another free slot at once
        return True

    def _refuse(self, job: Job) -> None:
        """EditkitError (naming the setting) when the queue is full, the job's session or visitor already holds its
        quota, or the job needs more memory than the whole budget. Called under the lock."""
        lim, jobs = limits(), [j for j in self._running + self._waiting if not j.cancelled]  # stopping: not counted
        if len(self._waiting) >= lim.waiting:
            raise EditkitError(f"the server is busy: {len(self._running)} jobs running and {len(self._waiting)} "
                               f"waiting; try again in a minute ({lim.cite('waiting')})")
        mine = sum(1 for j in jobs if job.owner and j.owner == job.owner)
        if mine >= lim.session_jobs:
            raise EditkitError(f"this session already has {mine} long job(s) running or waiting; wait for it or "
                               f"cancel it ({lim.cite('session_jobs')})")
        theirs = sum(1 for j in jobs if job.address and j.address == job.address)
        if theirs >= lim.visitor_jobs:
            raise EditkitError(f"your address already has {theirs} long jobs running or waiting (all its "
                               f"sessions together); wait for one to finish ({lim.cite('visitor_jobs')})")
        whole = self.budget(sum(j.memory for j in self._running))
        if job.memory > whole:
            s = settings()
            raise EditkitError(f"{job.name} needs about {gigabytes(job.memory)} of working memory, more than this "
                               f"server's budget for jobs, {gigabytes(whole)} ({s.cite('memory.budget')}); "
                               "smaller inputs need less")

    @contextmanager
    def slot(self, job: Job, on_wait: Callable[[int, int], None] | None = None):
        """Wait for a turn (on_wait(jobs ahead, jobs running) is called while waiting, at most every `poll`
        seconds, and may raise to give up), run the block, and free the slot whatever happens."""
        with self._cond:
            self._refuse(job)
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
    """fn(job.progress) in a queue slot, at the job's CPU priority (Job.niceness: background by default); returns
    its result (Cancelled when the job was cancelled)."""
    with queue.slot(job, on_wait), background_priority(job.niceness):
        job.check()
        return fn(job.progress)
