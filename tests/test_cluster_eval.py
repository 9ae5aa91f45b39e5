"""Evaluations, sweeps, lifelong runs and the app's jobs on Ray (editkit/runtime/cluster.py) give the serial
results: the same numbers in the same order, also when a worker is killed mid-run; the results files written
as items finish let a rerun resume from what any worker computed. One local Ray cluster of 2 CPUs (no
dashboard; conftest's ray_local) serves the module and is torn down after it."""
import shutil
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="the Ray backend needs the `ray` package (pip install -r requirements.txt)")

from cluster_util import same as equal  # noqa: E402
from cluster_util import stepper  # noqa: E402
from editkit.editing.run import run_edit  # noqa: E402
from editkit.evaluation import EvalSpec, evaluate, load_eval_set  # noqa: E402
from editkit.evaluation.sequential import SequentialSpec, sequential_methods  # noqa: E402
from editkit.evaluation.sweep import sweep  # noqa: E402
from editkit.runtime import cluster  # noqa: E402

FAST = {"v_num_grad_steps": 3}
SPEC = EvalSpec(set_name="counterfact-val", n=3, batch=1, n_gen=1, gen_tokens=5, greedy_tokens=4)
HPARAMS = {"rome": FAST, "memit": FAST}
SWEEP_SPEC = EvalSpec(set_name="counterfact-val", n=2, batch=1, n_gen=0, gen_tokens=5, greedy_tokens=4)
GRID = ["v_num_grad_steps=3", "mom2_shrinkage=0,0.5"]
TIMING = {"seconds", "seconds_per_request", "results_file", "cached", "edit_seconds", "resumed_at_batch"}


def same(a, b):
    """Equal apart from timings and file names."""
    return equal(a, b, TIMING)


@pytest.fixture(scope="module")
def serial(ray_lm, tmp_path_factory):
    return evaluate(ray_lm, ["rome", "memit"], SPEC, HPARAMS, out_dir=tmp_path_factory.mktemp("serial"))


def test_cli_ray_argument_fails_clearly(capsys):
    """A malformed or unreachable --ray address: one line and status 2, before any work."""
    from editkit.cli import main

    assert main(["evaluate", "--model", "tiny-gpt2", "--methods", "rome", "--n", "1", "--ray=head:port"]) == 2
    assert "is not a Ray address" in capsys.readouterr().err
    t0 = time.monotonic()
    assert main(["sweep", "--model", "tiny-gpt2", "--method", "rome", "--n", "1", "--ray=127.0.0.1:1"]) == 2
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in capsys.readouterr().err and time.monotonic() - t0 < 60


def test_evaluate_on_ray_equals_serial_and_resumes(ray_lm, serial, ray_local, tmp_path):
    out = evaluate(ray_lm, ["rome", "memit"], SPEC, HPARAMS, out_dir=tmp_path, backend=ray_local)
    assert out.computed_records == 6 and same(out.to_json(), serial.to_json())
    assert out.methods["rome"]["post_efficacy"] == serial.methods["rome"]["post_efficacy"]
    # the calling process wrote every line: a rerun, here or on Ray, computes nothing
    assert evaluate(ray_lm, ["rome", "memit"], SPEC, HPARAMS, out_dir=tmp_path).computed_records == 0
    lines = open(out.methods["memit"]["results_file"]).read().splitlines()
    open(out.methods["memit"]["results_file"], "w").write("\n".join(lines[:1]) + "\n")
    again = evaluate(ray_lm, ["rome", "memit"], SPEC, HPARAMS, out_dir=tmp_path, backend=ray_local)
    assert again.computed_records == 2 and same(again.methods, serial.methods)


def test_killed_worker_during_evaluate(ray_lm, serial, ray_local, tmp_path):
    """ray.kill of a worker computing an edit: its item runs again elsewhere; the results are the undisturbed
    run's."""
    killed = []
    assert len(cluster.start_workers(ray_lm.name, ray_local)) == 2

    def progress(fraction, message):
        pool = next(iter(cluster._POOLS.values()))
        busy = [s for s in pool.slots if s.busy]
        if not killed and busy and "records" in message:
            killed.append(busy[0].handle)
            ray.kill(busy[0].handle)

    out = evaluate(ray_lm, ["rome", "memit"], SPEC, HPARAMS, out_dir=tmp_path, backend=ray_local,
                   progress=progress)
    assert killed and same(out.to_json(), serial.to_json())


def test_sweep_on_ray_equals_serial(ray_lm, ray_local, ray_cache, tmp_path):
    spec = SWEEP_SPEC
    here = sweep(ray_lm, "rome", GRID, spec, out_dir=tmp_path / "here")
    for folder in ("sweeps", "targets"):  # computed afresh on Ray, not read from the serial run's ray_cache
        shutil.rmtree(ray_cache / folder, ignore_errors=True)
    there = sweep(ray_lm, "rome", GRID, spec, out_dir=tmp_path / "there", backend=ray_local)
    assert there.computed_records == 4 and not any(r["cached"] for r in there.settings)
    assert same(there.settings, here.settings) and there.pareto == here.pareto
    again = sweep(ray_lm, "rome", GRID, spec, out_dir=tmp_path / "there", backend=ray_local)
    assert all(r["cached"] for r in again.settings) and again.computed_records == 0


def test_lifelong_methods_in_parallel(ray_lm, ray_local):
    """Each method's sequence on its own worker; a rerun reads the checkpoints the workers wrote."""
    records = load_eval_set("counterfact-val", 4)
    small = dict(ppl_tokens=64, fluency_tokens=5, sample=2)
    plans = {"rome": (FAST, SequentialSpec(batch=1, eval_every=2, **small)),
             "memit": (FAST, SequentialSpec(batch=2, **small))}
    here = sequential_methods(ray_lm, plans, records)
    there = sequential_methods(ray_lm, plans, records, cache=False, backend=ray_local)
    as_json = lambda runs: {m: r.to_json() for m, r in runs.items()}  # noqa: E731
    assert list(there) == ["rome", "memit"] and same(as_json(there), as_json(here))
    resumed = sequential_methods(ray_lm, plans, records, backend=ray_local)
    assert all(r.resumed_at_batch == r.batches for r in resumed.values()) and same(as_json(resumed), as_json(here))


def test_app_job_with_kept_edits(ray_lm, ray_local, tmp_path):
    """A page's job as one item (pages/ui.run_item): on a worker, with the session's kept edits as delta, it gives
    what the server computes in process with them; and its results never come from the base model's files."""
    kept = run_edit(ray_lm, "rome", [{"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux",
                                  "target_new": "English"}], FAST).delta
    spec = EvalSpec(set_name="counterfact-val", n=1, batch=1, n_gen=0, greedy_tokens=0)
    job = cluster.Item(evaluate, (["rome"], spec, HPARAMS), {"out_dir": str(tmp_path)}, progress=True)
    base = cluster.run_one(ray_lm, job)
    seen = []
    there = cluster.run_one(ray_lm, job, ray_local, lambda f, m: seen.append(f), delta=[kept])
    here = cluster.run_one(ray_lm, job, delta=[kept])
    assert there.computed_records == 1 and here.computed_records == 0  # the worker's file, resumed here
    assert same(there.methods, here.methods) and not same(there.methods, base.methods)
    assert seen and seen[-1] == 1.0


def test_concurrent_runs_share_the_workers(ray_lm, ray_local):
    """Two runs at once (two sessions' jobs): the second gets a worker as soon as one of the first run's items
    ends, and ends long before the first run (which then continues on one worker)."""
    cluster.start_workers(ray_lm.name, ray_local)
    out = {}

    def run(name, n):
        items = [cluster.Item(stepper, (4, 0.5), label=f"{name} {k}", progress=True) for k in range(n)]  # 2 s each
        out[name] = cluster.run_items(ray_lm, items, ray_local)
        out[name + " end"] = time.monotonic()

    first = threading.Thread(target=run, args=("long", 6))
    first.start()
    time.sleep(1)
    run("short", 2)
    first.join(timeout=240)
    assert out["long"] == [4] * 6 and out["short"] == [4, 4]
    assert out["short end"] < out["long end"]  # it did not wait for the long run to end
