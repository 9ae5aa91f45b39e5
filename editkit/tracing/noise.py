"""Corruption noise for causal tracing (Meng et al. 2022, Sec. 2.1).

The corrupted run adds noise eps ~ N(0, nu^2) to the embedding of every subject token. ROME sets nu to three times
the standard deviation sigma of token embeddings, measured over the subjects of its known facts
(`collect_embedding_std`); editkit calibrates sigma the same way per model (on the embedding module's *output*, which
for Gemma includes its sqrt(d_model) scaling) and caches it. Alternatives, as in kmeng01/rome: an absolute scale,
uniform noise U(-nu, nu)... (ROME draws U(-1, 1) times the scale), or replacing the embeddings by the noise.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np
import torch

from ..core.cache import Store
from ..core.errors import EditkitError
from ..data.facts import known_facts


@dataclass(frozen=True)
class NoiseSpec:
    scale: float  # absolute scale nu, or a multiple of sigma when relative
    relative: bool = True  # scale is a multiple of the calibrated embedding std sigma
    uniform: bool = False  # U(-1, 1) * nu instead of N(0, 1) * nu
    replace: bool = False  # replace the subject embeddings instead of adding the noise

    def to_dict(self) -> dict:
        return asdict(self)


def parse_noise(spec: str | float, uniform: bool = False, replace: bool = False) -> NoiseSpec:
    """'3s' -> 3 sigma (relative); '0.1' -> absolute 0.1."""
    text = str(spec).strip().lower()
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(s|sigma)?", text)
    if not m:
        raise EditkitError(f"noise must be a number (absolute) or a multiple of sigma like '3s', not {spec!r}")
    value = float(m.group(1))
    if not np.isfinite(value) or value <= 0 or value > 1e4:
        raise EditkitError(f"noise scale must be positive and finite, not {spec!r}")
    return NoiseSpec(value, relative=bool(m.group(2)), uniform=uniform, replace=replace)


SIGMA = Store("tracing/sigma", version=1)


@torch.no_grad()
def embedding_sigma(lm, n_subjects: int = 1000) -> float:
    """Std of the embedding-module outputs over the tokens of known-fact subjects (cached per model)."""
    subjects = [f["subject"] for f in known_facts()[:n_subjects]]

    def build():
        values = []
        for start in range(0, len(subjects), 64):
            ids = [lm.tok(s, add_special_tokens=False)["input_ids"] for s in subjects[start:start + 64]]
            flat = torch.tensor([i for row in ids for i in row], device=lm.device)[None]
            values.append(lm.adapter.embed(flat)[0].float())
        return {"model": lm.name, "sigma": float(torch.cat(values).std()), "subjects": len(subjects)}

    return float(SIGMA.get_or_build(SIGMA.path(lm.name, subjects=len(subjects)), build)["sigma"])


def noise_scale(lm, spec: NoiseSpec) -> float:
    return spec.scale * embedding_sigma(lm) if spec.relative else spec.scale


def make_noise(seed: int, n: int, n_tokens: int, d: int, spec: NoiseSpec) -> torch.Tensor:
    """The (n, n_tokens, d) unit noise of one trace, from a seeded generator (ROME: RandomState(1))."""
    rng = np.random.RandomState(seed)
    raw = rng.uniform(-1, 1, (n, n_tokens, d)) if spec.uniform else rng.randn(n, n_tokens, d)
    return torch.from_numpy(raw).float()
