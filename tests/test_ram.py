"""The memory estimate before a model loads: parameters from the config alone (tied weights once), bytes per dtype,
a refusal with the numbers when the weights do not fit, and the plan over several GPUs (with made-up free memory:
no GPU needed)."""
import pytest
import torch

import editkit.model.ram as ram
from editkit.core.errors import EditkitError
from editkit.model.loading import TINY, estimate, load_model, tiny_config
from editkit.model.ram import Footprint, count_parameters, device_map


@pytest.mark.parametrize("name", TINY)
def test_parameters_from_the_config_equal_the_loaded_model(name):
    lm = load_model(name, device="cpu")
    assert count_parameters(tiny_config(name)) == sum(p.numel() for p in lm.model.parameters())


def test_bytes_per_dtype_and_the_estimate():
    fp = Footprint(1_000_000_000, torch.bfloat16)
    assert fp.bytes == 2_000_000_000 and fp.needed == int(2_000_000_000 * ram.OVERHEAD)
    assert "1.00 B parameters x 2 bytes (bfloat16) = 2.00 GB" in fp.describe()
    full, half = estimate("tiny-llama-tied", "float32"), estimate("tiny-llama-tied@bfloat16")
    assert full["parameters"] == half["parameters"] and full["bytes"] == 2 * half["bytes"] and full["fits"]
    assert "tiny-llama-tied@bfloat16" in half["text"] and "RAM free" in half["text"]
    assert estimate("nobody-xyz/no-such-model") is None  # offline in tests: no config, no estimate
    assert estimate("gpt2\x00") is None


def test_a_model_that_does_not_fit_is_refused_with_the_numbers(monkeypatch):
    monkeypatch.setattr(ram, "available", lambda device: (1_000_000, "RAM"))
    with pytest.raises(EditkitError) as err:
        load_model("tiny-llama", device="cpu")
    text = str(err.value)
    assert "tiny-llama does not fit" in text and "x 4 bytes (float32)" in text and "only 1.0 MB of RAM is free" in text
    assert "--dtype bfloat16" in text  # the way out
    row = estimate("tiny-llama")
    assert row["fits"] is False and "does not fit" in row["text"]


def test_device_map_over_several_gpus_without_a_gpu():
    config = tiny_config("tiny-llama")
    fp = Footprint(count_parameters(config), torch.float32)
    big = 10 * fp.needed
    assert device_map(config, fp, "m", free={0: big, 1: big}) is None  # fits on the first GPU
    plan = device_map(config, fp, "m", free={0: fp.needed // 2, 1: fp.needed},
                      plan=lambda cfg, f, mem: {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 1,
                                                "lm_head": 1})
    assert set(plan.values()) == {0, 1}
    with pytest.raises(EditkitError, match="2 GPU\\(s\\) have .* free together"):
        device_map(config, fp, "m", free={0: fp.needed // 4, 1: fp.needed // 4})
    with pytest.raises(EditkitError, match="without offloading"):
        device_map(config, fp, "m", free={0: fp.needed // 2, 1: fp.needed},
                   plan=lambda cfg, f, mem: {"model.embed_tokens": 0, "model.layers": "cpu"})
