"""The fan-out layer (editkit/runtime/cluster.py): in process it is the serial loop; on a local Ray cluster of 2 CPUs
(conftest's ray_local: started without a dashboard, torn down after) the same items give the same results, in item
order, also when a worker dies mid-item; an unreachable cluster and an unloadable model fail fast with one clear
message."""
import argparse
import threading
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

ray = pytest.importorskip("ray", reason="the Ray backend needs the `ray` package (pip install -r requirements.txt)")

from cluster_util import STEPS, die_once, edit_record, items, requests, stepper  # noqa: E402
from editkit.commands.common import add_ray_arg, ray_backend  # noqa: E402
from editkit.core.errors import Cancelled, EditkitError  # noqa: E402
from editkit.editing.run import run_edit  # noqa: E402
from editkit.model.loading import load_model  # noqa: E402
from editkit.runtime import cluster  # noqa: E402

N = 6


@pytest.fixture(scope="module")
def lm():
    # One torch thread, as each Ray worker: float32 sums split over threads differ in the last bit.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model("tiny-gpt2", device="cpu")
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def serial(lm):
    return cluster.run_items(lm, items(requests(N)))


def test_parse_backend():
    assert not cluster.parse_backend(None).ray and not cluster.parse_backend(" ").ray
    assert cluster.parse_backend("local:3").local == 3
    assert cluster.parse_backend("10.0.0.5").address == "10.0.0.5:6379"
    assert cluster.parse_backend("head:1234", threads=2).threads == 2
    for bad in ("local:0", "local:x", "ray://head:10001", "a b:1", "head:port", ":6379"):
        with pytest.raises(EditkitError):
            cluster.parse_backend(bad)


def test_ray_argument():
    parser = argparse.ArgumentParser()
    add_ray_arg(parser)
    assert not ray_backend(parser.parse_args([])).ray
    assert ray_backend(parser.parse_args(["--ray"])).address == "auto"
    assert ray_backend(parser.parse_args(["--ray", "local:2"])).local == 2


def test_in_process_is_the_serial_loop(lm, serial):
    reqs = requests(N)
    assert serial == [edit_record(lm, r) for r in reqs]
    seen, done = [], []
    cluster.run_items(lm, items(reqs[:3]), progress=lambda f, m: seen.append(f), done=lambda i, r: done.append(i))
    assert seen == [0, 1 / 3, 2 / 3, 1.0] and done == [0, 1, 2]


def test_ray_equals_serial(lm, serial, ray_local):
    seen, done = [], []
    out = cluster.run_items(lm, items(requests(N)), ray_local, lambda f, m: seen.append((f, m)),
                            done=lambda i, r: done.append(i))
    assert out == serial
    assert sorted(done) == list(range(N))
    finished = [m for f, m in seen if " done (" in m]
    assert len(finished) == N and seen[-1][0] == 1.0
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    info = cluster.start_workers(lm.name, ray_local)  # the pool is kept: no second start
    assert len(info) == 2 and len({w["pid"] for w in info}) == 2


def test_items_report_their_own_progress(lm, ray_local):
    run = [cluster.Item(stepper, (4, 0.6), label=f"job {k}", progress=True) for k in range(2)]
    here, there = [], []
    assert cluster.run_items(lm, run, progress=lambda f, m: here.append((f, m))) == [4, 4]
    assert (0.125, "job 0: step 2 of 4") in here and here[-1][0] == 1.0
    assert cluster.run_items(lm, run, ray_local, lambda f, m: there.append((f, m))) == [4, 4]
    assert any("step" in m for f, m in there) and there[-1][0] == 1.0


def test_shared_inputs_and_kept_edits(lm, ray_local):
    """Large inputs travel once through the object store; a kept edit (delta) is applied on the workers."""
    kept = run_edit(lm, "rome", requests(8)[7:], STEPS).delta
    shared = {"hparams": STEPS, "noise": torch.randn(512, 512, generator=torch.Generator().manual_seed(0))}
    run = items(requests(4))
    here = cluster.run_items(lm, run, shared=shared, delta=[kept])
    there = cluster.run_items(lm, run, ray_local, shared=shared, delta=[kept])
    assert there == here
    assert here != cluster.run_items(lm, run, shared=shared)  # the kept edit changed the numbers
    assert here[0]["shared"] == float(shared["noise"].sum())


def test_killed_worker_process(lm, serial, ray_local, tmp_path):
    """Item 2's worker process dies halfway: only that item runs again (on a live worker); the results are the
    undisturbed run's."""
    reqs, log = requests(N), str(tmp_path / "log")
    run = items(reqs, log=log)
    run[2] = cluster.Item(die_once, (reqs[2], str(tmp_path / "died"), log), label=reqs[2]["subject"])
    assert cluster.run_items(lm, run, ray_local) == serial
    assert (tmp_path / "died").exists()
    assert sorted(open(log).read().splitlines()) == sorted(r["subject"] for r in reqs)  # every other item once


def test_ray_kill_of_a_busy_worker(lm, serial, ray_local, tmp_path):
    """ray.kill of the worker computing the second item, when the first finishes: the same results."""
    log = str(tmp_path / "log")
    killed = []
    assert len(cluster.start_workers(lm.name, ray_local)) == 2  # both running from the first item on

    def progress(fraction, message):
        pool = next(iter(cluster._POOLS.values()))
        busy = [s for s in pool.slots if s.busy]
        if not killed and busy:
            killed.append(busy[0].handle)
            ray.kill(busy[0].handle)

    assert cluster.run_items(lm, items(requests(N), log=log), ray_local, progress) == serial
    assert killed
    lines = open(log).read().splitlines()
    assert set(lines) == {r["subject"] for r in requests(N)} and len(lines) <= N + 1


def test_item_error_is_the_callers(lm, ray_local):
    bad = {"prompt": "The capital is", "subject": "Nobody Here", "target_new": "Paris", "target_true": "Rome"}
    with pytest.raises(EditkitError, match="Nobody Here"):
        cluster.run_items(lm, [cluster.Item(edit_record, (bad,))], ray_local)


def test_cancel_stops_the_run(lm, ray_local):
    """A progress callback that raises Cancelled ends the run at once; the workers computing are stopped."""
    def cancel(fraction, message):
        raise Cancelled("stopped")

    t0 = time.monotonic()
    with pytest.raises(Cancelled):
        cluster.run_items(lm, items(requests(N)), ray_local, cancel)
    assert time.monotonic() - t0 < 60
    assert not any(s.busy for pool in cluster._POOLS.values() for s in pool.slots)


def test_bad_model_name_fails_clearly(ray_local):
    t0 = time.monotonic()
    with pytest.raises(EditkitError, match="could not load model '/no/such/model'"):
        cluster.run_items(SimpleNamespace(name="/no/such/model"), items(requests(2)), replace(ray_local, workers=1))
    assert time.monotonic() - t0 < 120


def test_callers_wait_for_one_connection(lm, serial, ray_local, monkeypatch):
    """A caller that gives up waiting for the local cluster to start leaves it starting; the callers after it (two
    at once here: two sessions' first jobs) wait for that start, and Ray is initialised once."""
    cluster.shutdown()
    inits = []
    real = ray.init
    monkeypatch.setattr(ray, "init", lambda **kw: inits.append(1) or real(**kw))
    monkeypatch.setattr(cluster, "LOCAL_START", 0.01)
    with pytest.raises(EditkitError, match="did not finish within 0 s"):
        cluster.connect(replace(ray_local, connect_timeout=0.01))
    monkeypatch.setattr(cluster, "LOCAL_START", 120.0)
    errors = []

    def connect():
        try:
            cluster.connect(ray_local)
        except EditkitError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=connect) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors and inits == [1] and ray.is_initialized()
    assert cluster.run_items(lm, items(requests(2)), ray_local) == serial[:2]


@pytest.mark.parametrize("address", ["127.0.0.1:1", "192.0.2.1:6379"])  # refused; TEST-NET-1, never answers
def test_unreachable_cluster_fails_fast(lm, address):
    t0 = time.monotonic()
    with pytest.raises(EditkitError, match=f"cannot reach the Ray cluster at {address}"):
        cluster.run_items(lm, items(requests(1)), cluster.parse_backend(address, connect_timeout=3))
    assert time.monotonic() - t0 < 10
