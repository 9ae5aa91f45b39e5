"""The CUDA path (marked `gpu`, skipped without a CUDA GPU; `benchmarks/gpu.sh` runs them): loading and the model
card on the GPU, tracing, statistics and every editing method on CUDA against the same computation on the CPU, and
the embedded model in float32 and bfloat16."""
from pathlib import Path

import pytest
import torch

from editkit.editing.api import run_edit
from editkit.editing.methods import names
from editkit.editing.requests import parse_requests
from editkit.editing.stats import second_moment
from editkit.model.loading import load_model
from editkit.model.scoring import score_targets
from editkit.model.text import top_k
from editkit.model.weights import applied
from editkit.tracing import TraceSetup, TraceSpec, fast_trace

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (benchmarks/gpu.sh)")]

REQUEST = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English",
           "target_true": "French"}
APP = str(Path(__file__).resolve().parent.parent / "app.py")


def _margin(lm, delta) -> float:
    r = parse_requests(REQUEST)[0]
    with applied(lm, delta):
        new, true = score_targets(lm, [r.rewrite, r.rewrite], [r.target_new, r.target_true])
    return new.logprob - true.logprob


@pytest.fixture(scope="module")
def pair():
    """tiny-llama-tied (tied head, GQA) on the CPU and on the GPU, the same weights."""
    return load_model("tiny-llama-tied", device="cpu"), load_model("tiny-llama-tied", device="cuda")


def test_load_on_cuda_and_model_card(pair):
    cpu, gpu = pair
    assert gpu.describe()["device"].startswith("cuda") and gpu.device.type == "cuda"
    assert all(p.device.type == "cuda" for p in gpu.model.parameters())
    assert gpu.model.lm_head.weight is gpu.model.model.embed_tokens.weight
    for name, p in cpu.model.named_parameters():
        assert torch.equal(p, dict(gpu.model.named_parameters())[name].cpu()), name


def test_home_page_model_card_shows_the_gpu():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state["model_choice"] = "tiny-gpt2"
    at.run()
    assert not at.exception
    device = {m.label: m.value for m in at.metric}["device"]
    assert str(device).startswith("cuda")


@pytest.mark.parametrize("kind", ["hidden", "mlp", "attn"])
def test_tracing_on_cuda_equals_cpu(pair, kind):
    cpu, gpu = pair
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
        assert C_gpu[layer].device.type == "cuda"
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
    assert all(d.device.type == "cuda" for d in result.delta.values())
    assert abs(moved[1] - moved[0]) <= 0.05 * abs(moved[0]) + 0.05, moved


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_embedded_model_on_cuda(dtype):
    lm = load_model("gemma-3-270m", device="cuda", dtype=dtype)
    assert lm.device.type == "cuda" and lm.describe()["dtype"] == dtype
    assert top_k(lm, "The Eiffel Tower is located in the city of", 1)[0].token == " Paris"
    before = _margin(lm, {})
    result = run_edit(lm, "rome", REQUEST)
    assert before < 0 < _margin(lm, result.delta)
