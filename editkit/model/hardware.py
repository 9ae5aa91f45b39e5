"""Does this machine multiply bfloat16 matrices faster than float32 ones? Measured once per device and process.

The tracing engine's fast mode (bf16 matmuls) and half-precision weights pay only where the hardware computes bf16
natively: AVX-512 BF16 / AMX on recent x86 CPUs, tensor cores on GPUs. On a CPU with AVX2 only (most laptops, AMD Zen
3 servers) torch's bf16 fallback runs at a few hundredths of the float32 rate (docs/results/speed.md), so there the
"fast" mode would be the slow one. A flag read from the CPU cannot tell every case (oneDNN emulates bf16 well on
some AVX-512 CPUs without BF16), so both rates are measured on a product of the tracing engine's kind (128 x 512 by
512 x 512, the best of 3-20 after a warm-up: 20 ms, a fifth of a second on the slowest path). EDITKIT_FAST_BF16=on / off
replaces the measurement.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

import torch

from ..core.errors import EditkitError

FORCE = "EDITKIT_FAST_BF16"  # "on" / "off": the operator's choice instead of the measurement
FAST_RATIO = 1.2  # bf16 counts as fast where it runs at >= 1.2x the float32 rate (a margin over timing noise)
SHAPE = (128, 512, 512)  # (m, k, n) of the probe's product
_RATES: dict[str, float] = {}  # "cpu:torch.float32" -> GMAC/s
_LOCK = threading.Lock()


@dataclass(frozen=True)
class MatmulRates:
    """The measured matmul rates (GMAC/s) of one device in float32 and bfloat16."""

    device: str
    float32: float
    bfloat16: float

    @property
    def ratio(self) -> float:
        """bf16's rate over float32's: above 1 where bf16 is faster."""
        return self.bfloat16 / self.float32

    @property
    def fast_bf16(self) -> bool:
        return self.ratio >= FAST_RATIO

    def describe(self) -> str:
        """'bf16 matmuls run at 0.2 GMAC/s on cpu, 0.004x float32's 53.5'."""
        return (f"bf16 matmuls run at {self.bfloat16:.1f} GMAC/s on {self.device}, {self.ratio:.2g}x float32's "
                f"{self.float32:.1f}")


def measure_rate(dtype: torch.dtype, device: str | torch.device = "cpu",
                 shape: tuple[int, int, int] = SHAPE) -> float:
    """GMAC/s of one (m x k) @ (k x n) product in `dtype` on `device`, now (not cached; rate() caches the probe)."""
    device = torch.device(device)
    m, k, n = shape
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(k, n, generator=gen).to(device=device, dtype=dtype)
    times: list[float] = []
    while len(times) < 4 or (sum(times[1:]) < 0.02 and len(times) < 21):  # a warm-up, then 3-20 timed products
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t)
    best = min(times[1:])
    return m * k * n / max(best, 1e-9) / 1e9


def rate(dtype: torch.dtype, device: str | torch.device = "cpu") -> float:
    """`device`'s matmul rate (GMAC/s) in `dtype`, measured the first time this process asks (cached)."""
    device = torch.device(device)
    key = f"{device}:{dtype}"
    with _LOCK:
        if key not in _RATES:
            with torch.no_grad():
                _RATES[key] = round(measure_rate(dtype, device), 2)
        return _RATES[key]


def matmul_rates(device: str | torch.device = "cpu") -> MatmulRates:
    """The float32 and bf16 matmul rates of `device` (measured once per process)."""
    return MatmulRates(str(torch.device(device)), rate(torch.float32, device), rate(torch.bfloat16, device))


def slow_dtype_note(dtype: torch.dtype, device: str | torch.device = "cpu") -> str | None:
    """Why weights in `dtype` would run slower than float32 on `device` (None where they do not): said when a model
    is loaded in half precision, which saves memory but on a CPU without bf16 / fp16 instructions costs speed."""
    if dtype == torch.float32:
        return None
    half, full = rate(dtype, device), rate(torch.float32, device)
    if half >= full:
        return None
    name = str(dtype).removeprefix("torch.")
    return (f"{name} weights are slow on this machine: its {name} matmuls run at {half:.1f} GMAC/s, "
            f"{half / full:.2g}x float32's {full:.1f}; float32 is faster here where the memory allows it")


def _forced() -> str | None:
    """The operator's EDITKIT_FAST_BF16: "on", "off" or None (unset: measured)."""
    forced = os.environ.get(FORCE, "").strip().lower()
    if forced and forced not in ("on", "off"):
        raise EditkitError(f"{FORCE} must be 'on' or 'off' (unset: measured), not {forced!r}")
    return forced or None


def fast_bf16(device: str | torch.device = "cpu") -> bool:
    """Whether the tracing engine's fast mode runs in bf16 on `device`: where its bf16 matmuls are faster than float32
    (measured), or as the operator set EDITKIT_FAST_BF16 ("on" / "off")."""
    forced = _forced()
    return forced == "on" if forced else matmul_rates(device).fast_bf16


def fast_precision(device: str | torch.device = "cpu") -> str:
    """The precision of the tracing engine's fast mode on `device`: "bfloat16" where bf16 matmuls are faster than
    float32, else "float32" (there the fast mode would be slower than the exact engine, so the exact one runs)."""
    return "bfloat16" if fast_bf16(device) else "float32"


def slow_bf16_note(device: str | torch.device = "cpu") -> str | None:
    """Why the fast mode is off on `device` (None where it is on): said beside every result it concerns."""
    if fast_bf16(device):
        return None
    why = (f"{FORCE}=off" if _forced() == "off" else
           f"its {matmul_rates(device).describe()}: bf16 would be slower, not faster")
    return f"Fast mode is off on this machine ({why}). Traces here are exact (ROME's float32 scores)."
