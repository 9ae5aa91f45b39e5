"""Two sessions on one shared model, each with its own real ROME edit, in two threads that run at the same time (no
lock): each thread sees exactly its own edit (logits equal the single-threaded reference), never the other's, the
base weights never change, also when a body raises or while another session is in the middle of an edit."""
import threading

import pytest
import torch

from editkit.editing.run import run_edit
from editkit.model import isolation, weights
from editkit.model.loading import load_model
from editkit.model.text import last_logits

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
    errors, seen = [], [[], []]
    inside = [0]
    overlap = [0]  # times a session computed while the other one was inside its own session

    def worker(i):
        try:
            for _ in range(rounds):
                barrier.wait(timeout=60)  # both threads enter their session at the same moment
                with isolation.session(lm, deltas[i]):
                    inside[0] += 1
                    for _ in range(2):
                        with torch.no_grad():
                            out = last_logits(lm, PROMPTS)
                        seen[i].append(out)
                        overlap[0] += inside[0] > 1
                        threading.Event().wait(0.002)  # give the other thread every chance to intrude
                    inside[0] -= 1
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
    # the sessions really ran at the same time (no lock serializes them)
    assert overlap[0] >= 1
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
        with isolation.session(lm, deltas[1]):
            with torch.no_grad():
                seen.append(last_logits(lm, PROMPTS))
        release.set()

    t1 = threading.Thread(target=failing)
    t1.start()
    assert started.wait(timeout=60)
    t2 = threading.Thread(target=other)  # runs while the failing session is open, then lets it raise
    t2.start()
    t1.join(timeout=60)
    t2.join(timeout=60)
    assert len(errors) == 1 and str(errors[0]) == "boom"
    assert len(seen) == 1 and torch.equal(seen[0], refs[1])
    _assert_base(lm, base)
    with torch.no_grad():
        assert torch.equal(last_logits(lm, PROMPTS), ref_base)


def test_a_computation_during_another_sessions_edit(setup):
    """A prediction in one session while another session is in the middle of computing an edit (ROME applies
    intermediate updates while it works): the prediction sees the base model, exactly, at every moment."""
    lm, base, deltas, refs, ref_base = setup
    stop, errors, seen = threading.Event(), [], []

    def predict():
        try:
            while not stop.is_set():
                with torch.no_grad():
                    seen.append(last_logits(lm, PROMPTS))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    t = threading.Thread(target=predict)
    t.start()
    try:
        with isolation.session(lm, deltas[1]):
            edit = run_edit(lm, "memit", [dict(r) for r in REQUESTS])  # layer-by-layer updates inside
    finally:
        stop.set()
        t.join(timeout=120)
    assert not errors and len(seen) >= 2
    assert all(torch.equal(out, ref_base) for out in seen)
    assert edit.delta and all(torch.isfinite(d).all() for d in edit.delta.values())
    _assert_base(lm, base)


def test_nested_session_is_reentrant(setup):
    lm, base, deltas, refs, _ = setup
    with isolation.session(lm, deltas[0]):
        with isolation.session(lm):  # library code nesting its own session keeps the outer edit
            with torch.no_grad():
                assert torch.equal(last_logits(lm, PROMPTS), refs[0])
    _assert_base(lm, base)
