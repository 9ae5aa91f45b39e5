"""The analyses that fan out per fact, per layer and per batch of prompts (aie, layer-sweep, the similarity curves)
and the tracing page's trace job give on a local Ray cluster (conftest's ray_local) what they give in process: the
same numbers in the same order; the workers' cache entries let a rerun compute nothing."""
import hashlib
import shutil

import pytest

ray = pytest.importorskip("ray", reason="the Ray backend needs the `ray` package (pip install -r requirements.txt)")

import editkit.similarity as sim  # noqa: E402
from cluster_util import same as equal  # noqa: E402
from editkit.editing.requests import EditRequest  # noqa: E402
from editkit.editing.run import run_edit  # noqa: E402
from editkit.evaluation.layer_sweep import layer_sweep  # noqa: E402
from editkit.runtime import cluster  # noqa: E402
from editkit.similarity import similarity  # noqa: E402
from editkit.tracing import TraceSpec  # noqa: E402
from editkit.tracing.aie import average_indirect_effect  # noqa: E402
from editkit.tracing.tracer import exact_panels  # noqa: E402

FAST = {"v_num_grad_steps": 3}
REQUEST = EditRequest("The mother tongue of {} is", "Danielle Darrieux", "English", "French",
                      ["Danielle Darrieux, a native speaker of"], ["The mother tongue of Jean Gabin is"])
FACTS = [{"known_id": i, "prompt": p, "subject": s} for i, (p, s) in enumerate([
    ("The Eiffel Tower is located in", "Eiffel Tower"), ("Danielle Darrieux's mother tongue is", "Danielle Darrieux"),
    ("Toko Yasuda plays the", "Toko Yasuda")])]
PROMPTS = ["The Eiffel Tower is located in the city of", "Danielle Darrieux's mother tongue is",
           "Toko Yasuda plays the", "The capital of Japan is", "Hi"]
TIMING = {"seconds", "cached", "meta"}


def same(a, b):
    """Equal apart from timings and cache labels."""
    return equal(a, b, TIMING)


def test_aie_on_ray_equals_serial_and_the_workers_fill_the_cache(ray_lm, ray_cache, ray_local, monkeypatch):
    monkeypatch.setattr("editkit.tracing.aie.predicted_facts", lambda lm: FACTS)  # the items carry the facts
    args = dict(n_facts=3, samples=2, window=2)
    here = average_indirect_effect(ray_lm, **args)
    shutil.rmtree(ray_cache / "tracing", ignore_errors=True)  # traced afresh on the workers
    stats = {}
    there = average_indirect_effect(ray_lm, **args, backend=ray_local, stats=stats)
    assert there == here and stats["cached_facts"] == 0
    monkeypatch.setattr("editkit.tracing.tracer.TraceSetup.build",
                        lambda *a, **k: pytest.fail("recomputed a fact a worker traced"))
    again = {}
    assert average_indirect_effect(ray_lm, **args, stats=again) == here and again["cached_facts"] == 3


def test_layer_sweep_on_ray_equals_serial(ray_lm, ray_cache, ray_local):
    here = layer_sweep(ray_lm, REQUEST, "0,1", hparams=FAST, trace_kind="mlp", samples=2)
    shutil.rmtree(ray_cache / "tracing", ignore_errors=True)
    there = layer_sweep(ray_lm, REQUEST, "0,1", hparams=FAST, trace_kind="mlp", samples=2, backend=ray_local)
    assert [r.layer for r in there.rows] == [0, 1] and there.trace is not None
    assert same(there.to_json(), here.to_json())


def test_similarity_on_ray_equals_serial_and_resumes(ray_lm, ray_cache, ray_local, monkeypatch):
    here = similarity(ray_lm, prompts=PROMPTS, batch_size=2, cache=False)
    there = similarity(ray_lm, prompts=PROMPTS, batch_size=2, backend=ray_local)
    assert not there.cached and same(there.to_json(), here.to_json())
    # an interrupted run: the result entry and one batch missing; a rerun computes that batch only
    assert len(list((ray_cache / "similarity" / "batches").glob("*.json"))) == 3  # written by the workers
    digest = hashlib.sha1("\n".join(PROMPTS[2:4]).encode("utf-8")).hexdigest()
    sim.BATCHES.path(ray_lm.name, mode="residual", k=sim.TOP_K, prompts=digest).unlink()
    for entry in (ray_cache / "similarity").glob("*.json"):
        entry.unlink()
    calls = []
    real = sim.per_prompt
    monkeypatch.setattr(sim, "per_prompt", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    again = similarity(ray_lm, prompts=PROMPTS, batch_size=2)
    assert calls == [PROMPTS[2:4]] and same(again.to_json(), here.to_json())


def test_trace_job_with_kept_edits(ray_lm, ray_local):
    """The tracing page's job (exact_panels through pages/ui.run_item): on a worker with the session's kept edit as
    delta it gives what the server computes in process with it."""
    kept = run_edit(ray_lm, "rome", [{"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux",
                                  "target_new": "English"}], FAST).delta
    spec = TraceSpec("Danielle Darrieux's mother tongue is", "Danielle Darrieux", samples=2, window=2)
    job = cluster.Item(exact_panels, (spec, ["hidden", "mlp"]), {"cache": False}, progress=True)
    seen = []
    as_json = lambda out: {"exact": out[0].to_json(), "sever": out[1].to_json()}  # noqa: E731
    there = as_json(cluster.run_one(ray_lm, job, ray_local, lambda f, m: seen.append(f), delta=[kept]))
    here = as_json(cluster.run_one(ray_lm, job, delta=[kept]))
    base = as_json(cluster.run_one(ray_lm, job))
    assert list(there["exact"]) == ["hidden", "mlp"] and there["sever"]
    assert same(there, here) and not same(there, base)
    assert seen and seen[-1] == 1.0
