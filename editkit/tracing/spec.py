"""What one causal trace computes: a settings dataclass shared by the tracer, the setup, the CLI and the pages.

    spec = TraceSpec("The Space Needle is in downtown", "Space Needle", samples=10, noise="3s", window=10)
    trace(lm, spec)                        # kind -> TraceResult (tracing/__init__.py)
    Tracer(lm, spec).result("mlp")         # step by step, cached (tracer.py)
    TraceSetup.build(lm, spec)             # the clean and corrupted runs (setup.py)

The kinds are causal tracing's names for the restored states (sites.TRACE_KINDS: hidden = resid_post,
mlp = mlp_out, attn = attn_out).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.errors import EditkitError
from ..model.hardware import fast_precision
from ..model.sites import TRACE_KINDS
from .noise import NoiseSpec, parse_noise

PRECISIONS = ("float32", "bfloat16")  # ROME's scores; the engine's fast mode (engine.py)


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise EditkitError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")


def effective_precision(precision: str, device) -> str:
    """The precision a trace asked for runs in on `device`: the fast mode ("bfloat16") where that device multiplies
    bf16 matrices faster than float32 ones (model/hardware.py), else the exact engine, which is then the faster of
    the two (the result's precision says which ran; hardware.slow_bf16_note says why)."""
    check_precision(precision)
    return precision if precision == "float32" else fast_precision(device)


def check_kind(kind: str) -> None:
    if kind not in TRACE_KINDS:
        raise EditkitError(f"kind must be one of {', '.join(TRACE_KINDS)} (or 'all'), not {kind!r}")


def check_kinds(kinds) -> list[str]:
    """A list of kinds from "all" (or None), one kind, or several."""
    kinds = list(TRACE_KINDS) if kinds in ("all", None) else [kinds] if isinstance(kinds, str) else list(kinds)
    for kind in kinds:
        check_kind(kind)
    return kinds


@dataclass(frozen=True)
class TraceSpec:
    """One trace (Meng et al. 2022, Sec. 2.1): the subject's embeddings in `prompt` (its `occurrence`-th match,
    0 = the first) get noise (`noise`: a NoiseSpec or its text, '3s' = 3 x the embedding std or '0.1' absolute) in
    `samples` corrupted runs drawn with `seed`; restoring a state measures p(target) (default: the clean run's top
    token). MLP and attention panels restore `window` layers around each layer; `kinds` are the panels `trace`
    computes. `precision` "bfloat16" is the engine's fast mode (bf16 matmuls in the restored runs, an
    approximation: engine.py); "float32" (default) gives ROME's scores."""

    prompt: str
    subject: str
    target: str | None = None
    samples: int = 10
    noise: NoiseSpec | str = "3s"
    window: int = 10
    seed: int = 1
    occurrence: int = 0
    kinds: tuple = tuple(TRACE_KINDS)
    precision: str = "float32"

    def __post_init__(self):
        if not isinstance(self.noise, NoiseSpec):
            object.__setattr__(self, "noise", parse_noise(self.noise))
        if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 1:
            raise EditkitError("window must be a positive integer")
        object.__setattr__(self, "kinds", tuple(check_kinds(self.kinds)))
        check_precision(self.precision)

    @property
    def fast(self) -> bool:
        """The engine's fast mode: an approximation (engine.py)."""
        return self.precision != "float32"


def trace_specs(prompt, subject, settings: dict) -> list[TraceSpec]:
    """The TraceSpecs of the notebook API's trace arguments: one spec, one prompt and subject, or lists of them
    (paired; a list of specs as it is); `settings` are TraceSpec's other fields."""
    if isinstance(prompt, TraceSpec):
        return [prompt]
    if not isinstance(prompt, (list, tuple)):
        if isinstance(subject, (list, tuple)):
            raise EditkitError("one prompt with a list of subjects: give as many prompts as subjects")
        return [TraceSpec(prompt, subject, **settings)]
    if not prompt:
        raise EditkitError("trace: the list of prompts is empty")
    if all(isinstance(p, TraceSpec) for p in prompt):
        return list(prompt)
    if not isinstance(subject, (list, tuple)) or len(subject) != len(prompt):
        raise EditkitError(f"a list of {len(prompt)} prompts needs a list of as many subjects, one per "
                           "prompt")
    return [TraceSpec(p, s, **settings) for p, s in zip(prompt, subject)]
