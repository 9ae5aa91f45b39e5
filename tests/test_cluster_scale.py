"""`bench scale` (evaluation/scale.py) on a tiny model: the in-process run and a 1-worker local Ray cluster (started
and torn down by the benchmark) give equal results; the report has the fixed costs, the speed-up, what bounds it and
the 1,000-record projection."""
import json

import pytest

ray = pytest.importorskip("ray", reason="the Ray backend needs the `ray` package (pip install -r requirements.txt)")

from editkit.cli import main  # noqa: E402
from editkit.evaluation.scale import ScaleSpec, bench_scale  # noqa: E402
from editkit.model.loading import load_model  # noqa: E402
from editkit.runtime import cluster  # noqa: E402


@pytest.mark.full  # slow on 2 cores; the quick tier keeps cheaper checks of the same code
def test_bench_scale_on_a_tiny_model(tmp_path, monkeypatch):
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path))
    cluster.shutdown()  # one cluster per process: the benchmark starts its own
    out = bench_scale(load_model("tiny-gpt2", device="cpu"), ScaleSpec(records=2, workers=(1,)))
    assert not ray.is_initialized()
    here, there = out["results"]
    assert here["config"] == "in process" and there["workers"] == 1 and there["equal"]
    assert there["cluster_start_s"] > 0 and there["workers_start_s"] > 0 and there["seconds_per_record"] > 0
    assert out["bound"][0].startswith("1 worker: speed-up")
    p = out["projection"]
    assert p["records"] == 1000 and p["seconds"][1] > p["seconds"][8] > p["fixed_s"]
    json.dumps(out)


def test_bench_scale_arguments(capsys):
    assert main(["bench", "scale", "--model", "tiny-gpt2", "--workers", "1,x"]) == 2
    assert "--workers takes whole numbers" in capsys.readouterr().err
    assert main(["bench", "scale", "--model", "tiny-gpt2", "--records", "0"]) == 2
