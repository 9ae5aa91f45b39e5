"""Two sessions on one shared model, each with its own real ROME edit, in two interleaving threads: each thread
sees exactly its own edit (logits equal the single-threaded reference), never the other's, and the base weights
come back bitwise, also when the body raises."""
import threading

import pytest
import torch

from editkit import isolation
from editkit.editing import weights
from editkit.editing.api import run_edit
from editkit.models import load_model
from editkit.text import last_logits

PROMPTS = ["The Space Needle is located in the city of", "Danielle Darrieux speaks the language"]
REQUESTS = [
    {"prompt": "{} is located in the city of", "subject": "The Space Needle", "target_new": "Paris"},
    {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English"},
]


@pytest.fixture(scope="module")
def setup():
    lm = load_model("tiny-gpt2", device="cpu")  # its own copy: other tests' cached models stay untouched
    base = {n: p.detach().clone() for n, p in lm.model.named_parameters()}
    deltas = [run_edit(lm, "rome", dict(r)).delta for r in REQUESTS]
    with torch.no_grad():
        ref_base = last_logits(lm, PROMPTS)
        refs = []
        for d in deltas:
            with weights.applied(lm.model, d):
                refs.append(last_logits(lm, PROMPTS))
    # the edits really change the logits, and differently, so "saw the other edit" is detectable
    assert not torch.equal(refs[0], ref_base) and not torch.equal(refs[1], ref_base)
    assert not torch.equal(refs[0], refs[1])
    return lm, base, deltas, refs, ref_base


def _assert_base(lm, base):
    for n, p in lm.model.named_parameters():
        assert torch.equal(p, base[n]), n


def test_two_sessions_interleave_and_see_only_their_own_edit(setup):
    lm, base, deltas, refs, _ = setup
    rounds = 6
    barrier = threading.Barrier(2)
    errors, seen, waits = [], [[], []], [0, 0]
    order = []  # which thread held the session, in order: shows the interleaving

    def worker(i):
        try:
            for _ in range(rounds):
                barrier.wait(timeout=60)  # both threads ask for their session at the same moment
                with isolation.session(lm, deltas[i], on_wait=lambda: waits.__setitem__(i, waits[i] + 1)):
                    order.append(i)
                    for _ in range(2):
                        with torch.no_grad():
                            out = last_logits(lm, PROMPTS)
                        seen[i].append(out)
                        threading.Event().wait(0.002)  # give the other thread every chance to intrude
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads)
    for i in (0, 1):
        assert len(seen[i]) == 2 * rounds
        for out in seen[i]:
            assert torch.equal(out, refs[i])  # exactly its own edit
            assert not torch.equal(out, refs[1 - i])  # never the other's
    # the sessions really competed: someone waited for the lock, and both threads held it in turn
    assert sum(waits) >= 1
    assert set(order) == {0, 1} and any(a != b for a, b in zip(order, order[1:]))
    _assert_base(lm, base)


def test_session_restores_bitwise_when_the_body_raises(setup):
    lm, base, deltas, refs, ref_base = setup
    started, release = threading.Event(), threading.Event()
    errors, seen = [], []

    def failing():
        try:
            with isolation.session(lm, deltas[0]):
                started.set()
                release.wait(timeout=60)
                raise RuntimeError("boom")
        except RuntimeError as exc:
            errors.append(exc)

    def other():
        with isolation.session(lm, deltas[1], on_wait=lambda: release.set()):
            with torch.no_grad():
                seen.append(last_logits(lm, PROMPTS))

    t1 = threading.Thread(target=failing)
    t1.start()
    assert started.wait(timeout=60)
    t2 = threading.Thread(target=other)  # waits on the lock held by the failing session, then runs
    t2.start()
    t1.join(timeout=60)
    t2.join(timeout=60)
    assert len(errors) == 1 and str(errors[0]) == "boom"
    assert len(seen) == 1 and torch.equal(seen[0], refs[1])
    _assert_base(lm, base)
    with torch.no_grad():
        assert torch.equal(last_logits(lm, PROMPTS), ref_base)


def test_nested_session_is_reentrant(setup):
    lm, base, deltas, refs, _ = setup
    with isolation.session(lm, deltas[0]):
        with isolation.session(lm):  # library code nesting its own session keeps the outer edit
            with torch.no_grad():
                assert torch.equal(last_logits(lm, PROMPTS), refs[0])
    _assert_base(lm, base)
