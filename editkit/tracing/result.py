"""Trace results as JSON-serializable data."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class TraceResult:
    tokens: list[str]
    subject_range: tuple[int, int]
    answer: str
    answer_id: int
    high_score: float  # p(answer) in the clean run
    low_score: float  # p(answer) averaged over the corrupted runs
    kind: str  # hidden | mlp | attn
    window: int
    noise_scale: float
    noise: dict
    samples: int
    seed: int
    scores: list[list[float]]  # (tokens, layers): p(answer) with that state restored
    seconds: float = 0.0
    meta: dict = field(default_factory=dict)

    @property
    def indirect_effect(self) -> list[list[float]]:
        """score - low for every cell (Meng et al. 2022: IE)."""
        return [[s - self.low_score for s in row] for row in self.scores]

    def peak(self) -> tuple[int, int, float]:
        """(token, layer, score) of the largest restored probability."""
        best = max(((t, l, s) for t, row in enumerate(self.scores) for l, s in enumerate(row)), key=lambda x: x[2])
        return best

    def reading(self) -> str:
        t, l, s = self.peak()
        b, e = self.subject_range
        where = ("the last subject token" if t == e - 1 else "a subject token" if b <= t < e
                 else "the last token" if t == len(self.tokens) - 1 else "a token after the subject")
        return (f"Restoring the {self.kind} state at {self.tokens[t]!r} ({where}), layer {l}, recovers "
                f"p({self.answer!r}) = {s:.3f} (clean {self.high_score:.3f}, corrupted {self.low_score:.3f}).")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["subject_range"] = list(self.subject_range)
        d["indirect_effect"] = self.indirect_effect
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "TraceResult":
        """The result a to_dict() came from (derived fields are dropped)."""
        names = set(cls.__dataclass_fields__)
        kwargs = {k: v for k, v in d.items() if k in names}
        kwargs["subject_range"] = tuple(kwargs["subject_range"])
        kwargs["meta"] = dict(kwargs.get("meta") or {})
        return cls(**kwargs)
