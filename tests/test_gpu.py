"""The CUDA path (marked `gpu`, skipped without a CUDA GPU; `benchmarks/gpu.sh` runs them): loading and the model
card on the GPU, tracing, statistics and every editing method on CUDA against the same computation on the CPU, and
the embedded model in float32 and bfloat16.

EDITKIT_GPU_TEST_DEVICE=cpu runs the same comparisons with both sides on the CPU: a dry run of the tests' own logic
on a machine without a GPU (it cannot find a device mix-up, which only a GPU shows)."""
import os
from dataclasses import fields
from pathlib import Path

import pytest
import torch

from editkit.editing.methods import get, names
from editkit.editing.requests import parse_requests
from editkit.editing.run import run_edit
from editkit.editing.stats import second_moment
from editkit.model.loading import load_model
from editkit.model.scoring import score_targets
from editkit.model.text import top_k
from editkit.model.weights import applied
from editkit.tracing import TraceSetup, TraceSpec, fast_trace

DEVICE = os.environ.get("EDITKIT_GPU_TEST_DEVICE", "cuda")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(),
                                 reason="needs a CUDA GPU (benchmarks/gpu.sh)")]

REQUEST = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English",
           "target_true": "French"}
BATCH = [REQUEST, {"prompt": "{} is located in the city of", "subject": "The Eiffel Tower", "target_new": "Rome",
                   "target_true": "Paris"},
         {"prompt": "{} plays the sport of", "subject": "Michael Jordan", "target_new": "soccer",
          "target_true": "basketball"}]
# The stabilisers' options on the methods that have them: ENCORE's early stop and norm bound, and NAS's anchor (the
# paths the embedded model's lifelong runs take; on the GPU they once met CPU tensors the defaults never reach).
STABILISED = {"encore": {"v_stop_top1": 2, "v_max_norm": 3.3}, "nas": {"nas_anchor": 5.0}}
APP = str(Path(__file__).resolve().parent.parent / "app.py")


def _margin(lm, delta) -> float:
    r = parse_requests(REQUEST)[0]
    with applied(lm, delta):
        new, true = score_targets(lm, [r.rewrite, r.rewrite], [r.target_new, r.target_true])
    return new.logprob - true.logprob


@pytest.fixture(scope="module")
def pair():
    """tiny-llama-tied (tied head, GQA) on the CPU and on the GPU, the same weights."""
    return load_model("tiny-llama-tied", device="cpu"), load_model("tiny-llama-tied", device=DEVICE)


@pytest.fixture(scope="module")
def gemma_pair():
    """tiny-gemma3 (post-MLP norm: MEMIT's targets go through spread.reachable_output) on the CPU and the GPU."""
    return load_model("tiny-gemma3", device="cpu"), load_model("tiny-gemma3", device=DEVICE)


def test_load_on_cuda_and_model_card(pair):
    cpu, gpu = pair
    assert gpu.describe()["device"].startswith(DEVICE) and gpu.device.type == DEVICE
    assert all(p.device.type == DEVICE for p in gpu.model.parameters())
    assert gpu.model.lm_head.weight is gpu.model.model.embed_tokens.weight
    for name, p in cpu.model.named_parameters():
        assert torch.equal(p, dict(gpu.model.named_parameters())[name].cpu()), name


@pytest.mark.skipif(DEVICE != "cuda", reason="the page shows the GPU only where there is one")
def test_home_page_model_card_shows_the_gpu():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.run()
    assert not at.exception
    device = {m.label: m.value for m in at.metric}["device"]
    assert str(device).startswith("cuda")


@pytest.mark.parametrize("models", ["pair", "gemma_pair"])
@pytest.mark.parametrize("kind", ["hidden", "mlp", "attn"])
def test_tracing_on_cuda_equals_cpu(request, models, kind):
    """The three panels on tiny-llama-tied and on tiny-gemma3 (scaled embeddings, norms after attention and MLP)."""
    cpu, gpu = request.getfixturevalue(models)
    prompt, subject = "The Space Needle is in downtown Seattle", "Space Needle"
    a = fast_trace(cpu, TraceSetup.build(cpu, TraceSpec(prompt, subject, samples=3, noise="0.5")), kind, window=2)
    b = fast_trace(gpu, TraceSetup.build(gpu, TraceSpec(prompt, subject, samples=3, noise="0.5")), kind, window=2)
    assert float((a.cpu() - b.cpu()).abs().max()) < 1e-4


def test_statistics_on_cuda_equal_cpu(pair, tmp_path, monkeypatch):
    cpu, gpu = pair
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "cpu"))
    C_cpu = second_moment(cpu, [1, 2], 3000)
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "gpu"))  # computed afresh, not read back
    C_gpu = second_moment(gpu, [1, 2], 3000)
    for layer in (1, 2):
        assert C_gpu[layer].device.type == DEVICE
        rel = float((C_gpu[layer].cpu() - C_cpu[layer]).norm() / C_cpu[layer].norm())
        assert rel < 1e-4, (layer, rel)


@pytest.mark.parametrize("method", names())
def test_every_method_on_cuda(pair, method):
    cpu, gpu = pair
    moved = []
    for lm in (cpu, gpu):
        result = run_edit(lm, method, REQUEST)
        assert all(torch.isfinite(d).all() for d in result.delta.values())
        moved.append(_margin(lm, result.delta) - _margin(lm, {}))
    assert all(d.device.type == DEVICE for d in result.delta.values())
    assert abs(moved[1] - moved[0]) <= 0.05 * abs(moved[0]) + 0.05, moved


def _stabilised(method):
    own = {f.name for f in fields(get(method).hparams)}
    return [(name, hp) for name, hp in STABILISED.items() if set(hp) <= own]


@pytest.mark.parametrize("method", names())
def test_every_method_and_stabiliser_on_a_post_norm_model(gemma_pair, method):
    """A batch of three requests (the batch paths: the targets' shared initial values) on tiny-gemma3, with each
    stabiliser the method has: the deltas on the GPU are finite, stay there and equal the CPU's to 5%."""
    cpu, gpu = gemma_pair
    for name, hp in [("defaults", None), *_stabilised(method)]:
        a, b = (run_edit(lm, method, BATCH, hp) for lm in (cpu, gpu))
        assert set(a.delta) == set(b.delta), name
        for k, d in b.delta.items():
            assert d.device.type == DEVICE and torch.isfinite(d).all(), (name, k)
            rel = float((d.cpu() - a.delta[k]).norm() / a.delta[k].norm().clamp_min(1e-12))
            assert rel < 0.05, (method, name, k, rel)  # the targets' Adam steps amplify float rounding


def test_anchor_and_lifelong_run_on_cuda(gemma_pair, tmp_path, monkeypatch):
    """NAS's anchor estimate and two batches of a lifelong MEMIT run on the GPU equal the CPU's (the commands the
    1,000-edit table runs: `editkit anchor`, `evaluate --sequential`)."""
    from editkit.editing.run import anchor_from_edits
    from editkit.evaluation.sequential import SequentialSpec, sequential

    cpu, gpu = gemma_pair
    anchors = [anchor_from_edits(lm, "memit", parse_requests(BATCH[:2])).anchor for lm in (cpu, gpu)]
    assert abs(anchors[1] - anchors[0]) <= 1e-3 * abs(anchors[0]), anchors
    spec = SequentialSpec(batch=2, sample=None, ppl_tokens=64, fluency_prompts=("The city",), fluency_tokens=4)
    runs = []
    for lm in (cpu, gpu):
        monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / lm.device.type))
        runs.append(sequential(lm, "memit", BATCH + BATCH[:1], spec=spec, cache=False))
    for a, b in zip(runs[0].rows, runs[1].rows):
        assert abs(a["efficacy"] - b["efficacy"]) <= 0.5 + 1e-9  # at most one of the two requests of a batch
        assert abs(a["perplexity"] - b["perplexity"]) < 1e-2 * a["perplexity"]


@pytest.mark.parametrize("method", ["memit", "alphaedit"])
def test_lifelong_run_resumes_on_cuda(gemma_pair, tmp_path, monkeypatch, method):
    """A lifelong run stopped after its first batch and continued from its checkpoint on the GPU equals the run
    that never stopped (the checkpoint's deltas were once read onto the CPU and met the GPU's weights; AlphaEdit's
    earlier keys stay on the CPU, where SequenceState keeps them)."""
    from dataclasses import replace

    from editkit.evaluation.sequential import SequentialSpec, sequential

    gpu = gemma_pair[1]
    spec = SequentialSpec(batch=2, sample=None, ppl_tokens=64, fluency_prompts=("The city",), fluency_tokens=4)
    requests = BATCH + BATCH[:1]
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "stopped"))
    assert len(sequential(gpu, method, requests, spec=replace(spec, stop_after=1)).rows) == 1
    resumed = sequential(gpu, method, requests, spec=spec)
    monkeypatch.setenv("EDITKIT_CACHE", str(tmp_path / "whole"))
    whole = sequential(gpu, method, requests, spec=spec, cache=False)
    assert [r["edit"] for r in resumed.rows] == [r["edit"] for r in whole.rows] == [2, len(requests)]
    for a, b in zip(resumed.rows, whole.rows):
        assert a["efficacy"] == b["efficacy"] and abs(a["perplexity"] - b["perplexity"]) < 1e-4 * b["perplexity"]


def test_bench_helpers_on_cuda(pair):
    """`bench trace`'s matmul rates time the model's own device (they once mixed CPU inputs into a GPU head), and
    its preview's rank correlations read GPU tensors (numpy reads host memory only)."""
    from editkit.tracing.attribution import spearman
    from editkit.tracing.bench import matmul_rate

    rates = matmul_rate(pair[1], rows=32, repeat=1)
    assert rates["block_matmul_gmac_per_s"] > 0 and rates["unembed_gmac_per_s"] > 0
    scores = torch.tensor([[0.3, 0.1], [0.2, 0.9]])
    assert spearman(scores.to(DEVICE), scores) == pytest.approx(1.0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_embedded_model_on_cuda(dtype):
    lm = load_model("gemma-3-270m", device=DEVICE, dtype=dtype)
    assert lm.device.type == DEVICE and lm.describe()["dtype"] == dtype
    assert top_k(lm, "The Eiffel Tower is located in the city of", 1)[0].token == " Paris"
    before = _margin(lm, {})
    result = run_edit(lm, "rome", REQUEST)
    assert before < 0 < _margin(lm, result.delta)
