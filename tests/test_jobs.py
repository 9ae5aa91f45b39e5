"""Limits, jobs and the job queue (editkit/runtime/jobs.py): caps give clear errors, a cancelled job stops at its next
progress step and leaves nothing behind, the queue admits jobs first come first served and never runs more than
its slots at once."""
import threading

import pytest
import torch

from editkit.core import limits, settings
from editkit.core.errors import Cancelled, EditkitError
from editkit.core.limits import Limits, parse_limits_override
from editkit.model import weights
from editkit.model.text import last_logits
from editkit.model.tokens import check_prompt
from editkit.runtime import jobs
from editkit.runtime.jobs import Job, JobQueue
from editkit.tracing import TraceSpec, trace
from polling import until


def idle(queue: JobQueue) -> bool:
    """Nothing running or waiting, no memory reserved."""
    snap = queue.snapshot()
    return snap["running"] == [] and snap["waiting"] == [] and snap["reserved"] == 0


def queued(queue: JobQueue) -> int:
    snap = queue.snapshot()
    return len(snap["running"]) + len(snap["waiting"])


def test_limits_defaults_and_overrides(monkeypatch, tmp_path):
    assert Limits(**parse_limits_override("")) == Limits()
    assert Limits(**parse_limits_override('{"samples": 7, "jobs": 3}')) == Limits(samples=7, jobs=3)
    path = tmp_path / "limits.json"
    path.write_text('{"batch": 2}')
    assert parse_limits_override(str(path)) == {"batch": 2}
    monkeypatch.setenv(limits.ENV, '{"prompt_tokens": 5}')
    assert settings.limits().prompt_tokens == 5
    monkeypatch.delenv(limits.ENV)
    assert settings.limits() == Limits()


@pytest.mark.parametrize("text,message", [
    ('{"samples": 0}', "positive integer"), ('{"samples": 2.5}', "positive integer"),
    ('{"samples": true}', "positive integer"), ('{"samples": "3"}', "positive integer"),
    ('{"sample": 3}', "unknown limit"), ("[1, 2]", "JSON object"), ('{"samples": ', "not valid JSON"),
    ("/no/such/limits.json", "no readable JSON file"), ('{"samples": NaN}', "positive integer"),
])
def test_bad_limits_are_clear_errors(text, message):
    with pytest.raises(EditkitError, match=message):
        parse_limits_override(text)


def test_check_names_the_cap():
    lim = Limits(samples=5)
    lim.check(samples=5, batch=1, facts=None)
    with pytest.raises(EditkitError, match="6 noise samples is over this server's limit of 5"):
        lim.check(samples=6)
    with pytest.raises(EditkitError, match="no limit named"):
        lim.check(sample=1)


def test_prompt_token_cap_is_the_configured_limit(tiny_by_name, monkeypatch):
    lm = tiny_by_name("tiny-gpt2")
    prompt = "one two three four five six seven eight"
    check_prompt(lm, prompt)
    monkeypatch.setenv(limits.ENV, '{"prompt_tokens": 4}')
    with pytest.raises(EditkitError, match="the limit is 4"):
        check_prompt(lm, prompt)
    with pytest.raises(EditkitError, match="NUL"):
        check_prompt(lm, "a\x00b")


def test_job_progress_records_forwards_and_cancels():
    seen = []
    job = Job("trace", owner="s1", on_progress=lambda f, m: seen.append((f, m)))
    job.progress(0.5, "half")
    job.progress(2.0, "over")  # clamped
    assert seen == [(0.5, "half"), (1.0, "over")] and job.fraction == 1.0
    job.cancel()
    with pytest.raises(Cancelled, match="trace was cancelled"):
        job.progress(0.9, "late")
    assert seen[-1] == (1.0, "over")


def test_cancelling_a_real_trace_stops_it_and_leaves_no_trace_of_it(tiny_by_name):
    """A trace inside a session with an edit, cancelled from another thread mid-way: Cancelled is raised at the
    next progress step, the edit and every hook are gone afterwards, and the slot is free again."""
    lm = tiny_by_name("tiny-gpt2")
    delta = {lm.adapter.param_name("down_proj", 1): torch.full_like(lm.adapter.down_weight(1).T, 1e-3)}
    with torch.no_grad():
        ref = last_logits(lm, "The Space Needle is in downtown")
    queue = JobQueue(slots=1)
    job = Job("causal trace")
    steps = []

    def progress(f, msg):
        steps.append(f)
        if len(steps) == 2:  # cancelled from another thread, before the next step
            canceller = threading.Thread(target=job.cancel)
            canceller.start()
            canceller.join(10)

    job.on_progress = progress
    with pytest.raises(Cancelled):
        with weights.applied(lm, delta):
            jobs.run(job, lambda p: trace(lm, TraceSpec("The Space Needle is in downtown", "Space Needle", samples=2),
                                         progress=p), queue)
    assert job.state == "cancelled" and 2 <= len(steps) <= 3
    assert idle(queue)
    assert weights.model_key(lm) == lm.name
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in lm.model.modules())
    with torch.no_grad():
        assert torch.equal(last_logits(lm, "The Space Needle is in downtown"), ref)


def test_queue_runs_at_most_its_slots_first_come_first_served():
    queue = JobQueue(slots=2, poll=0.01)
    running, peak, order, lock = [0], [0], [], threading.Lock()
    gate, moved_up = threading.Event(), threading.Event()
    waits = {}

    admitted = []

    def work(i):
        job = Job(f"job{i}")
        admitted.append(job)

        def on_wait(ahead, n_running):
            waits.setdefault(i, []).append(ahead)
            if i == 5 and ahead < 3:
                moved_up.set()

        with queue.slot(job, on_wait):
            with lock:
                order.append(i)
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            gate.wait(timeout=10)
            if i in (2, 3):  # the two admitted after the gate hold their slots until job5 has seen its place move
                moved_up.wait(timeout=10)
            with lock:
                running[0] -= 1

    threads = []
    for i in range(6):
        t = threading.Thread(target=work, args=(i,))
        t.start()
        threads.append(t)
        # a known arrival order: the next starts once this one runs (the first two) or waits
        until(lambda: queued(queue) == i + 1 and len(queue.snapshot()["running"]) == min(i + 1, 2))
    until(lambda: all(i in waits for i in range(2, 6)))  # each waiting job has heard its first place
    snap = queue.snapshot()
    assert [j["name"] for j in snap["running"]] == ["job0", "job1"]
    assert [j["name"] for j in snap["waiting"]] == ["job2", "job3", "job4", "job5"]
    gate.set()
    for t in threads:
        t.join(timeout=20)
    assert peak[0] == 2 and sorted(order) == list(range(6))
    assert [j.name for j in sorted(admitted, key=lambda j: j.admitted)] == [f"job{i}" for i in range(6)]
    assert waits[5][0] == 3 and min(waits[5]) < 3  # it saw its position go down
    assert idle(queue)


def test_a_waiting_job_can_be_cancelled_and_a_full_queue_refuses(monkeypatch):
    queue = JobQueue(slots=1, poll=0.01)
    hold, started = threading.Event(), threading.Event()

    def holder():
        with queue.slot(Job("long")):
            started.set()
            hold.wait(timeout=10)

    t = threading.Thread(target=holder)
    t.start()
    assert started.wait(5)
    waiting = Job("queued")
    threading.Thread(target=lambda: until(lambda: waiting.state == "waiting") and waiting.cancel()).start()
    with pytest.raises(Cancelled):
        with queue.slot(waiting):
            pass
    assert waiting.state == "cancelled" and queue.snapshot()["waiting"] == []
    monkeypatch.setenv(limits.ENV, '{"waiting": 1}')

    def second():
        with queue.slot(Job("w1")):  # waits behind "long"
            pass

    w1 = threading.Thread(target=second)
    w1.start()
    assert until(lambda: [j["name"] for j in queue.snapshot()["waiting"]] == ["w1"])
    with pytest.raises(EditkitError, match="server is busy"):
        with queue.slot(Job("w2")):
            pass
    hold.set()
    t.join(timeout=5)
    w1.join(timeout=5)
    assert idle(queue)


def test_a_running_job_computes_at_background_priority():
    """Inside jobs.run the job's thread (and threads it starts) run at JOB_NICENESS; the caller's other threads
    keep their priority."""
    import os

    seen = {}

    def work(progress):
        seen["job"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        child = threading.Thread(target=lambda: seen.__setitem__(
            "child", os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        child.start()
        child.join()
        return 1

    def in_thread():
        seen["before"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        assert jobs.run(Job("work"), work, JobQueue(slots=1)) == 1
        seen["after"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    t = threading.Thread(target=in_thread)
    t.start()
    t.join(timeout=10)
    main = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert seen["job"] == max(jobs.JOB_NICENESS, seen["before"]) and seen["child"] == seen["job"]
    assert main == seen["before"]
    if os.geteuid() == 0:  # lowering a nice value back needs privileges
        assert seen["after"] == seen["before"]


def _hold(queue: JobQueue, job: Job, gate: threading.Event) -> threading.Thread:
    """A thread that holds `job` in a slot of `queue` until `gate` is set; returns once it runs or waits."""
    def run():
        with queue.slot(job):
            gate.wait(10)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    until(lambda: job.state in ("running", "waiting"), timeout=5)
    return t


def test_the_queue_admits_jobs_within_the_memory_budget():
    """Two slots, a budget of 100: a job of 60 runs, a second of 60 waits for memory (saying so) although a slot
    is free, a job of 150 is refused before it waits, with the numbers; the reservation is returned at the end."""
    queue = JobQueue(slots=2, poll=0.01, budget=lambda reserved: 100)
    gate = threading.Event()
    first, second = Job("a", memory=60), Job("b", memory=60)
    t1 = _hold(queue, first, gate)
    t2 = _hold(queue, second, gate)
    assert first.state == "running" and second.state == "waiting"
    assert second.message.startswith("waiting for memory") and queue.snapshot()["reserved"] == 60
    with pytest.raises(EditkitError, match=r"needs about .* of working memory, more than this server's budget"):
        with queue.slot(Job("huge", memory=150)):
            pass
    gate.set()
    t1.join(5)
    t2.join(5)
    assert second.state == "done" and idle(queue)


def test_a_session_and_a_visitor_get_their_quotas(monkeypatch):
    monkeypatch.setenv(limits.ENV, '{"session_jobs": 1, "visitor_jobs": 2, "jobs": 5}')
    queue = JobQueue(poll=0.01, budget=lambda reserved: 1 << 40)
    gate = threading.Event()
    threads = [_hold(queue, Job("mine", owner="s1"), gate),
               _hold(queue, Job("tab 1", owner="s2", address="198.51.100.7"), gate),
               _hold(queue, Job("tab 2", owner="s3", address="198.51.100.7"), gate)]
    with pytest.raises(EditkitError, match=r"this session already has 1 .*limits.session_jobs = 1, from"):
        with queue.slot(Job("again", owner="s1")):
            pass
    with pytest.raises(EditkitError, match=r"your address already has 2 .*limits.visitor_jobs = 2, from"):
        with queue.slot(Job("tab 3", owner="s4", address="198.51.100.7")):
            pass
    with queue.slot(Job("another visitor", owner="s5", address="198.51.100.8")):
        pass  # not held back by the others' quotas
    gate.set()
    for t in threads:
        t.join(5)
    assert idle(queue)


def test_a_job_extrapolates_the_time_left_once_it_has_enough_to_go_on():
    from editkit.runtime.jobs import Job

    job = Job("edit and compare")
    assert job.left() is None  # not started
    job.started, job.fraction = 1000.0, 0.02
    assert job.left(now=1100.0) is None  # under 5% done: no estimate yet
    job.fraction = 0.25
    assert job.left(now=1005.0) is None  # under 10 s spent
    assert job.left(now=1020.0) == "about 60 s left" and job.left(now=1600.0) == "about 30 min left"


def test_a_sessions_new_job_waits_for_its_cancelled_one_to_stop_instead_of_being_refused(monkeypatch):
    """A Cancel (any click) starts the session's new script run at once, while the old run's job computes on
    until its next progress step. "Add the fact" clicked in that window was refused for the session's one job;
    now the old job is cancelled (supersede) and the new one waits for it to stop, saying so, and then starts.
    Another session's job behind it is not held back meanwhile."""
    monkeypatch.setenv(limits.ENV, '{"session_jobs": 1, "jobs": 2}')
    queue = JobQueue(poll=0.01, budget=lambda reserved: 1 << 40)
    old = Job("adding a fact to the lesson", owner="s1")
    started, stopped, step = threading.Event(), threading.Event(), threading.Event()

    def old_run():  # computes until its next progress step, which comes only when `step` is set
        with pytest.raises(Cancelled):
            with queue.slot(old):
                started.set()
                while True:
                    step.wait(10)
                    old.progress(0.5, "tracing")
        stopped.set()

    t = threading.Thread(target=old_run)
    t.start()
    assert started.wait(5)
    assert queue.supersede("s1") == [old] and old.cancelled and queue.supersede("nobody") == []
    new, messages, order = Job("adding a fact to the lesson", owner="s1"), [], []

    def new_run():
        with queue.slot(new, lambda ahead, running: messages.append(new.message)):
            order.append("s1")

    n = threading.Thread(target=new_run)
    n.start()
    assert until(lambda: new.state == "waiting" and messages) and not stopped.is_set()
    assert messages and messages[-1] == "waiting for your cancelled job (adding a fact to the lesson) to stop"
    with queue.slot(Job("a trace", owner="s2")):  # the free slot is not held up by s1's wait
        order.append("s2")
    step.set()  # the old job reaches its next progress step and stops
    n.join(5)
    t.join(5)
    assert stopped.is_set() and order == ["s2", "s1"] and new.state == "done" and idle(queue)
