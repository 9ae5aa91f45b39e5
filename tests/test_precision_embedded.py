"""The embedded model in bfloat16: ROME's acceptance edit reaches its target (its own statistics and templates,
computed in bf16 forwards with float32/float64 sums), as in fp32. Only where this machine multiplies bf16 faster than
float32 (model/hardware.py): on an AVX2-only CPU torch's bf16 fallback would take hours over the statistics' corpus
(tests/test_precision.py checks bf16 edits on the tiny models on every machine)."""
import pytest
import torch

from editkit.editing.requests import parse_requests
from editkit.editing.run import run_edit
from editkit.model.hardware import matmul_rates
from editkit.model.loading import load_model
from editkit.model.scoring import score_targets
from editkit.model.weights import applied

REQUEST = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English",
           "target_true": "French"}


def _margin(lm, delta) -> float:
    r = parse_requests(REQUEST)[0]
    with applied(lm, delta):
        new, true = score_targets(lm, [r.rewrite, r.rewrite], [r.target_new, r.target_true])
    return new.logprob - true.logprob


RATES = matmul_rates()


@pytest.mark.skipif(not RATES.fast_bf16, reason=f"bf16 is the slow path here ({RATES.describe()})")
def test_embedded_bf16_rome_reaches_its_target(gemma):
    """Gemma 3 270M in bfloat16 (its own statistics, computed in bf16 forwards and float32/float64 sums): ROME's
    Darrieux edit flips French to English, as in fp32."""
    half = load_model("gemma-3-270m", dtype="bfloat16")
    assert half.name == "gemma-3-270m@bfloat16"
    request = parse_requests(REQUEST)
    before = _margin(half, {})
    result = run_edit(half, "rome", request)
    after = _margin(half, result.delta)
    full = run_edit(gemma, "rome", request)
    full_before, full_after = _margin(gemma, {}), _margin(gemma, full.delta)
    print(f"ROME on gemma-3-270m, log P(English) - log P(French): bf16 {before:.2f} -> {after:.2f} "
          f"({result.seconds:.1f} s), fp32 {full_before:.2f} -> {full_after:.2f} ({full.seconds:.1f} s)")
    assert before < 0 < after and full_before < 0 < full_after  # the same efficacy: both flip the fact
    assert all(d.dtype == torch.float32 for d in result.delta.values())
