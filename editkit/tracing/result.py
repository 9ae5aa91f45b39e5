"""Trace results: one kind's heatmap (TraceResult) and the kinds of one prompt together (Traces), typed, with
their JSON form (what the result cache and `trace --json` hold), tables and figures."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..core.results import JsonObject, Result, frame
from ..figures.tracing import heatmap, trace_panels


@dataclass
class TraceResult(Result):
    """One causal trace (Meng et al. 2022): p(answer) with each (token, layer) state of `kind` restored in the
    corrupted runs. `scores[t][l]`; `indirect_effect` subtracts the corrupted p; `reading()` says where it peaks."""

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
    low_sd: float | None = None  # p(answer)'s spread over the corrupted runs (None: one run; stored before)

    @property
    def band(self) -> float | None:
        """The 95% band of p within which a restoration cannot be told from no restoration by this trace's n
        noise samples, 1.96 s sqrt(2 / n), s the spread of p(answer) over the corrupted runs (a restored run
        taken to spread alike: the two-sample band of a difference of means, evaluation/verdict.py's Z95).
        None with one sample or for a result stored without the spread."""
        if not self.low_sd or self.samples < 2:
            return None
        return 1.96 * self.low_sd * (2 / self.samples) ** 0.5

    @property
    def indirect_effect(self) -> list[list[float]]:
        """score - low for every cell (Meng et al. 2022: IE)."""
        return [[s - self.low_score for s in row] for row in self.scores]

    def peak(self, tokens=None) -> tuple[int, int, float]:
        """(token, layer, score) of the largest restored probability, among `tokens` (indices; default
        all)."""
        rows = range(len(self.scores)) if tokens is None else tokens
        return max(((t, l, s) for t in rows for l, s in enumerate(self.scores[t])), key=lambda x: x[2])

    def site_peak(self) -> tuple[int, int, float]:
        """The peak a researcher reads: for hidden states and MLP outputs the largest restoration at a subject
        token (restoring the last token's hidden state in late layers restores the output itself, a trivial
        peak), for attention outputs the largest anywhere (ROME's late site is the last token)."""
        return self.peak(None if self.kind == "attn" else range(*self.subject_range))

    def reading(self) -> str:
        """One sentence: where the restored probability peaks, against the clean and corrupted runs."""
        t, l, s = self.peak()
        b, e = self.subject_range
        where = ("the last subject token" if t == e - 1 else "a subject token" if b <= t < e
                 else "the last token" if t == len(self.tokens) - 1 else "a token after the subject")
        return (f"Restoring the {self.kind} state at {self.tokens[t]!r} ({where}), layer {l}, recovers "
                f"p({self.answer!r}) = {s:.3f} (clean {self.high_score:.3f}, corrupted "
                f"{self.low_score:.3f}).")

    @property
    def estimate(self) -> bool:
        """An attribution-patching estimate (the preview), not the exact trace."""
        return bool(self.meta.get("estimate"))

    @property
    def approximation(self) -> bool:
        """Computed in the engine's fast mode (bf16 matmuls, engine.py), not ROME's exact scores."""
        return bool(self.meta.get("approximation"))

    @property
    def cached(self) -> bool:
        """Read from the shared result cache rather than computed now."""
        return bool(self.meta.get("cached"))

    @property
    def prompt(self) -> str | None:
        return self.meta.get("prompt")

    def timing(self) -> str:
        """How long this panel took, in words: from the cache, alone, or as part of one run with other kinds
        (`seconds` is then its share of that run; the run's own time is said)."""
        if self.cached:
            return "from the cache"
        together = self.meta.get("together")
        if together and len(together) > 1 and "run_s" in self.meta:
            return (f"computed in one run of {self.meta['run_s']:.1f} s with "
                    f"{', '.join(k for k in together if k != self.kind)}")
        return f"computed in {self.seconds:.1f} s"

    def headline(self) -> str:
        agreement = self.meta.get("agreement") if self.estimate else None
        return self.reading() + (f" {agreement['text']}" if agreement else "")

    def to_json(self) -> JsonObject:
        """The cache's and `--json`'s form: every field, the subject range as a list, and the indirect effect."""
        d = asdict(self)
        d["subject_range"] = list(self.subject_range)
        d["indirect_effect"] = self.indirect_effect
        return d

    @classmethod
    def _from_json(cls, d: dict) -> "TraceResult":
        names = set(cls.__dataclass_fields__)
        kwargs = {k: v for k, v in d.items() if k in names}  # derived fields (indirect_effect) are dropped
        kwargs["subject_range"] = tuple(kwargs["subject_range"])
        kwargs["meta"] = dict(kwargs.get("meta") or {})
        return cls(**kwargs)

    def figure(self, relative: bool = False):
        """The heatmap the tracing page draws (tokens down, layers across; ROME's colours; an estimate in grey).
        relative=True puts layer l at l / (n_layers - 1)."""
        return heatmap(self.to_json(), relative)

    def to_frame(self):
        """The heatmap in long format, one row per (token, layer): kind, token_index, token, subject (a subject
        token?), layer, p, indirect_effect. The tracing page's CSV download holds the kinds' rows together."""
        b, e = self.subject_range
        return frame([{"kind": self.kind, "token_index": t, "token": tok, "subject": b <= t < e, "layer": l, "p": p,
                       "indirect_effect": p - self.low_score}
                      for t, (tok, row) in enumerate(zip(self.tokens, self.scores)) for l, p in enumerate(row)])


@dataclass
class Traces(Result):
    """The kinds of one traced prompt (what `editkit.trace` returns without `kind`): kind -> TraceResult, read as
    `traces["mlp"]`. The clean and corrupted runs are shared, so `answer`, `tokens`, `high_score` and `low_score`
    are those of every kind."""

    results: dict[str, TraceResult]

    def __getitem__(self, kind: str) -> TraceResult:
        return self.results[kind]

    def __contains__(self, kind) -> bool:
        return kind in self.results

    def __iter__(self):
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def items(self):
        return self.results.items()

    def values(self):
        return self.results.values()

    @property
    def first(self) -> TraceResult:
        return next(iter(self.results.values()))

    @property
    def answer(self) -> str:
        return self.first.answer

    @property
    def tokens(self) -> list[str]:
        return self.first.tokens

    @property
    def high_score(self) -> float:
        return self.first.high_score

    @property
    def low_score(self) -> float:
        return self.first.low_score

    @property
    def seconds(self) -> float:
        """The time the kinds took together, each run counted once (the clean and corrupted setup, then the
        kinds computed alone or in one shared run); 0 when all came from the cache."""
        fresh = [r for r in self.values() if not r.cached]
        if not fresh:
            return 0.0
        return max(r.meta.get("setup_s", 0.0) for r in fresh) + sum(r.seconds for r in fresh)

    def headline(self) -> str:
        r = self.first
        took = "from the cache" if not self.seconds else f"{self.seconds:.1f} s"
        return (f"p({r.answer!r}) clean {r.high_score:.3f}, corrupted {r.low_score:.3f}; "
                + "; ".join(f"{k}: peak {v.peak()[2]:.3f} at layer {v.peak()[1]}" for k, v in self.items())
                + f" ({took})")

    def to_json(self) -> JsonObject:
        """kind -> TraceResult.to_json(): the tracing page's JSON download."""
        return {kind: r.to_json() for kind, r in self.results.items()}

    @classmethod
    def _from_json(cls, d: dict) -> "Traces":
        return cls({kind: TraceResult._from_json(v) for kind, v in d.items()})

    def figure(self):
        """The kinds side by side, one heatmap each, as the tracing page lays them out."""
        return trace_panels(self.to_json())

    def to_frame(self):
        """Every kind's rows (TraceResult.to_frame) in one long table."""
        return frame([row for r in self.results.values() for row in r.to_frame().to_dict("records")])
