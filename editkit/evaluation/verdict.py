"""Comparisons that conclude: which option is best by a named measure, which others are within noise of it, said in
one sentence. Every side-by-side view (methods, layers, lifelong runs) states its result through `Ranking.sentence`.

The noise is estimated from the measurements themselves, never set by hand:
- options measured on the same prompts (methods on one request, layers of a sweep): the measure is a sum of group
  means (rewrite, paraphrases, neighbours), and the difference between two options is paired prompt by prompt:
  SE(d) = sqrt(sum_g var(d_g) / n_g). A group of one prompt adds nothing: it is the measured prompt itself, not a
  sample of prompts;
- rates over many items (a lifelong run's efficacy over its measured edits): the binomial SE of each rate,
  SE(d) = sqrt(p1 (1 - p1) / n1 + p2 (1 - p2) / n2).
One rule says what is within noise, so a student can check every sentence against the number it quotes: the
band is 1.96 SE(d), the 95% band of every mean editkit reports (metrics.mean_ci), taken as the widest band of
an option within its own band of the best; every option closer to the best than that band is within noise,
every other one is outside it (and outside its own band too). Calling each option against its own band alone
listed "layer 0 (2.458)" as within noise and "layer 11 (2.463)", closer to the best, as outside it (the
Lesson's step 9). Where no spread can be estimated (every group has a single prompt) the ranking says so
instead of calling a tie.

A curve has a peak worth naming by the same rule (`peak`): only where some point of it lies outside the band
of its largest value; the points within the band are the peak's extent, and a curve all within the band is
flat.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

Z95 = 1.96


@dataclass(frozen=True)
class Ranking:
    """Options ranked by one measure, with the noise of each one's difference from the best."""

    measure: str  # "the summed margin P(new) − P(true) over rewrite, paraphrases and neighbours"
    values: dict  # option label -> value of the measure
    best: str
    noise: dict  # option label -> 1.96 SE of its difference from the best (None: no spread to estimate)
    higher_is_better: bool = True
    digits: int = 4  # significant digits shown
    unit: str = ""
    labels: dict = field(default_factory=dict)  # option -> how the sentence names it (default: the option)
    scale: float = 1.0  # shown as value x scale (rates as percentages)
    no_noise: str = "one prompt per group: no spread to estimate the noise from"

    def gap(self, option) -> float:
        """How far an option is from the best (>= 0)."""
        return abs(self.values[option] - self.values[self.best])

    @property
    def band(self) -> float | None:
        """The one 95% band the sentence quotes: the widest noise among the options within their own noise of
        the best (module docstring); None when no option is."""
        own = [n for o, n in self.noise.items() if o != self.best and n is not None and self.gap(o) <= n]
        return max(own, default=None)

    @property
    def ties(self) -> list[str]:
        """The options within noise of the best: closer to it than `band` (the best itself excluded), nearest
        first."""
        band = self.band
        if band is None:
            return []
        return sorted((o for o in self.values if o != self.best and self.gap(o) <= band), key=self.gap)

    @property
    def estimated(self) -> bool:
        return any(n is not None for o, n in self.noise.items() if o != self.best)

    def name(self, option) -> str:
        return str(self.labels.get(option, option))

    def fmt(self, v: float, digits: int | None = None) -> str:
        """A value with the decimals `digits` significant digits give the largest one, so every value of a sentence
        has the same decimals ("2.344 ... -0.785", not "-0.7848"); `digits` alone: significant digits (the bands)."""
        if digits is not None:
            return f"{v * self.scale:.{digits}g}{self.unit}"
        top = max((abs(x * self.scale) for x in self.values.values() if x is not None and math.isfinite(x)),
                  default=0.0)
        decimals = max(0, self.digits - 1 - (math.floor(math.log10(top)) if top > 0 else 0))
        return f"{v * self.scale:.{decimals}f}{self.unit}"

    def sentence(self) -> str:
        """One sentence: the best option by the measure, those within noise of it (closer than the one band it
        quotes), the rest in order."""
        order = sorted(self.values, key=self.values.get, reverse=self.higher_is_better)
        best = f"{self.name(self.best)} ({self.fmt(self.values[self.best])})"
        if len(order) == 1:
            return f"By {self.measure}: {best}."
        ties = self.ties
        rest = [o for o in order if o != self.best and o not in ties]
        if ties:
            tied = and_list([f"{self.name(o)} ({self.fmt(self.values[o])})" for o in ties])
            verb = "is" if len(ties) == 1 else "are"
            head = (f"By {self.measure}, {best} is best, but {tied} {verb} within noise of it (less than the "
                    f"95% band, ±{self.fmt(self.band, 2)}, away)")
        else:
            head = f"By {self.measure}, {best} is best"
            if self.estimated:
                near = min((o for o in rest if self.noise.get(o) is not None), key=self.gap, default=None)
                if near is not None:
                    head += (f", ahead of {self.name(near)} ({self.fmt(self.values[near])}) by more than "
                             f"the noise (95% band ±{self.fmt(self.noise[near], 2)})")
                    rest.remove(near)
            else:
                head += f" ({self.no_noise})"
        if rest:
            head += "; then " + ", ".join(f"{self.name(o)} ({self.fmt(self.values[o])})" for o in rest)
        return head + "."

    def to_dict(self) -> dict:
        return {**asdict(self), "ties": self.ties, "band": self.band, "sentence": self.sentence()}


@dataclass(frozen=True)
class Peak:
    """Where a curve peaks, by the module's rule: its largest value, and its extent (every index within the
    band of that value, in order). `band` None: no noise estimate, the peak is the largest value as
    measured."""

    index: int
    value: float
    extent: tuple[int, ...]
    band: float | None

    def overlaps(self, other: Peak, scale: float = 1.0, other_scale: float = 1.0) -> bool:
        """Whether two peaks' extents meet once each index is multiplied by its scale (e.g. relative
        depths)."""
        lo, hi = min(self.extent) * scale, max(self.extent) * scale
        olo, ohi = min(other.extent) * other_scale, max(other.extent) * other_scale
        return lo <= ohi and olo <= hi


def peak(values, band: float | None) -> Peak | None:
    """The peak of a curve when it is worth naming: None when every value lies within `band` of the largest (a
    flat curve); `band` None names the largest value as measured (nothing to judge it by)."""
    values = list(values)
    top = max(range(len(values)), key=values.__getitem__)
    if band is None:
        return Peak(top, values[top], (top,), None)
    extent = tuple(i for i, v in enumerate(values) if values[top] - v <= band)
    if len(extent) == len(values):
        return None
    return Peak(top, values[top], extent, band)


def within_noise(a: float, b: float, band: float | None) -> bool:
    """The module's rule for two values: their difference is no larger than the band (never, without one)."""
    return band is not None and abs(a - b) <= band


def and_list(items: list[str]) -> str:
    """'A', 'A and B', 'A, B and C': the one way editkit's sentences list things."""
    return f"{', '.join(items[:-1])} and {items[-1]}" if len(items) > 1 else "".join(items)


def _var(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def paired(per_prompt: dict, measure: str, higher_is_better: bool = True, **kw) -> Ranking:
    """Rank options measured on the same prompts. `per_prompt`: option -> group -> values per prompt (the same
    prompts, in the same order, for every option); an option's value is the sum of its group means, and its noise
    the paired 1.96 SE of its difference from the best (module docstring)."""
    def value(groups):
        return sum(sum(v) / len(v) for v in groups.values() if v)

    values = {o: value(g) for o, g in per_prompt.items()}
    pick = max if higher_is_better else min
    best = pick(values, key=values.get)
    noise = {}
    for o, groups in per_prompt.items():
        terms = []
        for g, xs in groups.items():
            ys = per_prompt[best].get(g) or []
            if len(xs) != len(ys) or len(xs) < 2:
                continue
            terms.append(_var([a - b for a, b in zip(xs, ys)]) / len(xs))
        noise[o] = Z95 * math.sqrt(sum(terms)) if terms else None
    return Ranking(measure, values, best, noise, higher_is_better, **kw)


def rates(rates_: dict, counts: dict, measure: str, higher_is_better: bool = True, **kw) -> Ranking:
    """Rank rates in [0, 1] measured on `counts` items each (binomial noise of the difference, module docstring)."""
    pick = max if higher_is_better else min
    best = pick(rates_, key=rates_.get)
    pb, nb = rates_[best], counts[best]
    noise = {o: Z95 * math.sqrt(p * (1 - p) / counts[o] + pb * (1 - pb) / nb) if counts.get(o) and nb else None
             for o, p in rates_.items()}
    return Ranking(measure, rates_, best, noise, higher_is_better, **kw)


def margins(probabilities: dict) -> dict:
    """group -> per-prompt margins from one measurement's probabilities ({"rewrite": [{"p_new", "p_true"}], ...}):
    P(new) − P(true) on the rewrite and paraphrase prompts (the edit took), P(true) − P(new) on the neighbours
    (nothing leaked). Prompts without a true target are left out."""
    out = {}
    for group, sign in (("rewrite", 1), ("paraphrase", 1), ("neighborhood", -1)):
        out[group] = [sign * (r["p_new"] - r["p_true"]) for r in probabilities.get(group, []) if "p_true" in r]
    return out


MARGIN_MEASURE = "P(new) − P(true) on the prompt and its paraphrases plus P(true) − P(new) on the neighbours"
