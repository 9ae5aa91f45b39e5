"""The lesson pack builder on a local Ray cluster (2 CPUs, no dashboard): one work item per part, the parts that
read a fact's trace in a second round; the pack equals the one built in this process (same files, same numbers:
workers and this process both run one torch thread), and a rerun on Ray computes nothing."""
import json

import pytest

from cluster_util import same as equal
from editkit.lesson import compute
from editkit.lesson.build import build
from lesson_util import MODEL, SAMPLES, write_facts

pytest.importorskip("ray")

SETTINGS = compute.Settings(samples=SAMPLES, sweep_layers="0,1", bleed_facts=2)
TIMING = {"seconds", "computed_at", "elapsed_s"}


def parts(folder):
    """Every part file of a pack: relative path -> JSON (the manifest apart: it records times)."""
    return {str(p.relative_to(folder)): json.loads(p.read_text()) for p in sorted(folder.rglob("*.json"))
            if p.name != "manifest.json"}


def same(a, b):
    return equal(a, b, TIMING)


def test_a_pack_built_on_ray_equals_the_serial_one(ray_lm, ray_cache, ray_local, tmp_path):
    facts = write_facts(tmp_path)
    here = build(facts, tmp_path / "here", MODEL, methods=["rome", "memit"], settings=SETTINGS, lm=ray_lm)
    seen = []
    there = build(facts, tmp_path / "there", MODEL, methods=["rome", "memit"], settings=SETTINGS, lm=ray_lm,
                  backend=ray_local, progress=lambda f, m: seen.append(f))
    assert there["computed"] == here["computed"] == here["parts"] and there["facts"] == here["facts"]
    a, b = parts(tmp_path / "here"), parts(tmp_path / "there")
    assert set(a) == set(b) and len(a) > 5
    for name in a:
        assert same(a[name], b[name]), name
    assert seen and max(seen) == 1.0
    again = build(facts, tmp_path / "there", MODEL, methods=["rome", "memit"], settings=SETTINGS, lm=ray_lm,
                  backend=ray_local)
    assert again["computed"] == 0 and again["skipped"] == here["parts"]
