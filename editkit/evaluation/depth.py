"""One fact traced on two models, in words: where each model's restored share peaks on a relative depth axis,
and what the two curves show side by side (the Causal tracing page's "Two models side by side").

Each curve is the share of p(answer) a restoration brings back at the model's last subject token, (p - p*) /
(p_clean - p*) (figures.tracing.restored_share), so a model that is more certain of the answer does not look
more localized. Its noise is the trace's band (TraceResult.band: the spread of the corrupted runs over n noise
samples) in share units, and a peak is named by verdict.peak's rule: only where some layer lies outside the
band of the largest share; the layers within it are the peak's extent. Depths are compared only between two
named peaks (they differ when their extents do not meet on the relative depth axis), shares only by the same
rule; on "The Sagrada Familia is located in the city of" SmolLM2's flat curve (share <= 0.10 everywhere) was
said to peak at layer 0 and to recall the fact "earlier, by 0.29", a peak the data did not show. A curve is
not where a model recalls the fact either when another subject token restores more than its peak by more than
the band: on "The Golden Gate Bridge is located in the city of" both models restore <= 0.04 at ' Bridge' and
about 0.3-0.45 at ' Gate', and their 0.02 and 0.04 peaks were compared as if they were the recall.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.results import jsons_of
from ..figures.tracing import relative_depth, restored_share
from .verdict import Peak, and_list, peak, within_noise


@dataclass(frozen=True)
class Curve:
    """One model's restored share at its last subject token, with its band (share units) and named peak."""

    name: str
    token: str
    share: list[float]
    band: float | None
    peak: Peak | None  # None: no peak worth naming (a flat curve, or another subject token restores more)
    elsewhere: tuple[str, int, float] | None  # (token, layer, share): the subject's largest restoration, when
    # at another token than the last

    @property
    def depths(self) -> list[float]:
        return relative_depth(len(self.share))

    def says(self) -> str:
        """Where this curve peaks, or that it has no peak worth naming (and where its restorations lie)."""
        n = len(self.share)
        if self.peak is None and self.elsewhere is not None and peak(self.share, self.band) is not None:
            tok, layer, share = self.elsewhere
            noise = "" if self.band is None else f" by more than the noise (95% band ±{self.band:.2f})"
            return (f"{self.name} restores little at {self.token!r} (at most {max(self.share):.2f}), less than "
                    f"at {tok!r}, layer {layer} (share {share:.2f}){noise}: the last subject token is not "
                    "where it recalls this fact")
        if self.peak is None:
            text = (f"{self.name} has no peak worth naming at {self.token!r}: every layer restores within "
                    f"noise of its largest share, {max(self.share):.2f} (95% band ±{self.band:.2f})")
            if self.elsewhere is not None:
                tok, layer, share = self.elsewhere
                text += f"; its largest restoration is at {tok!r}, layer {layer} (share {share:.2f})"
            return text
        p = self.peak
        extent = (f"; {layers(p.extent)} within noise of it" if len(p.extent) > 1 else
                  "" if p.band is None else f", ±{p.band:.2f}")
        noise = "; no noise estimate (one noise sample)" if p.band is None else ""
        return (f"{self.name} peaks at relative depth {self.depths[p.index]:.2f} (layer {p.index} of {n}, "
                f"share {p.value:.2f}{extent}{noise})")


def layers(indices) -> str:
    """'layers 3-5 and 9': indices as runs."""
    runs, start = [], None
    idx = sorted(indices)
    for i, x in enumerate(idx):
        if start is None:
            start = x
        if i + 1 == len(idx) or idx[i + 1] != x + 1:
            runs.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return ("layer " if len(idx) == 1 else "layers ") + and_list(runs)


def curve(name: str, r: dict) -> Curve:
    """A TraceResult's JSON as its model's curve (the band in share units: the band over p_clean - p*)."""
    b, e = r["subject_range"]
    token = e - 1
    share = restored_share(r, token)
    gap = r["high_score"] - r["low_score"]
    sd = r.get("low_sd")
    band = (1.96 * sd * math.sqrt(2 / r["samples"]) / gap) if sd and r["samples"] > 1 and gap > 0 else None
    named = peak(share, band)
    cells = ((t, l) for t in range(b, e) for l in range(len(share)))
    t, l = max(cells, key=lambda x: r["scores"][x[0]][x[1]])
    best = restored_share(r, t)[l]
    elsewhere = None if t == token else (r["tokens"][t], l, best)
    if named is not None and elsewhere is not None and best > named.value and \
            not within_noise(best, named.value, band):  # the recall is at another subject token
        named = None
    return Curve(name, r["tokens"][token], share, band, named, elsewhere)


def depth_summary(traces: dict, not_given: list[str] = ()) -> str:
    """The curves in words: each model's peak (or none worth naming), then, for two models that both give the
    answer and both have a peak, whether they sit at the same relative depth and which restores more, each by
    the module's rule. `not_given`: models whose own prediction is another answer (answer_mismatches)."""
    traces = jsons_of(traces)
    curves = [curve(name, r) for name, r in traces.items()]
    text = "; ".join(c.says() for c in curves) + "."
    if not_given:  # one model's curve follows a fact it does not give: the depths are not the same recall
        return text + (f" Not compared: {', '.join(not_given)} does not give this answer itself (the warning "
                       "above), so the curves are not the same fact recalled.")
    if len(curves) != 2:
        return text
    a, b = curves
    flat = [c.name for c in curves if c.peak is None]
    if flat:
        return text + (f" No depths compared: {and_list(flat)} {'has' if len(flat) == 1 else 'have'} no peak "
                       "at the last subject token to compare.")
    return text + " " + compare(a, b)


def compare(a: Curve, b: Curve) -> str:
    """Two named peaks: the same relative depth when their extents meet (or lie within one layer's spacing of
    the shallower model), else which is earlier; then their shares by the rule."""
    step = max(1 / max(len(a.share) - 1, 1), 1 / max(len(b.share) - 1, 1))
    ea, eb = ([c.depths[i] for i in c.peak.extent] for c in (a, b))
    apart = max(min(eb) - max(ea), min(ea) - max(eb), 0.0)
    if apart <= step:
        text = (f"Both at the same relative depth (their peaks' extents meet within one layer's spacing, "
                f"{step:.2f}).")
    else:
        early = a if min(ea) < min(eb) else b
        text = f"{early.name} recalls it earlier in its depth, by {apart:.2f} between the peaks' extents."
    pa, pb = a.peak.value, b.peak.value
    band = math.hypot(a.band, b.band) if a.band is not None and b.band is not None else None
    if within_noise(pa, pb, band):
        return text + (f" Their peaks restore as much within noise ({pa:.2f} and {pb:.2f}, 95% band "
                       f"±{band:.2f}).")
    more = a if pa >= pb else b
    return text + (f" By the share of p(answer) restored at the peak, {more.name} restores more "
                   f"({max(pa, pb):.2f} against {min(pa, pb):.2f}"
                   + (f", more than the 95% band ±{band:.2f})." if band is not None
                      else ", no noise estimate)."))


def answer_mismatches(traces: dict, tops: dict[str, tuple[str, float]]) -> dict[str, str]:
    """A warning per model (name -> text) whose own top prediction (`tops`: name -> (token, p)) is not the
    traced answer: its curve follows an answer it does not give, so it is not the same fact recalled."""
    traces = jsons_of(traces)
    answer = next(iter(traces.values()))["answer"]
    return {name: f"{name} itself predicts {token!r} here (p = {p:.2f}), not {answer!r}: its trace follows "
                  f"{answer!r}, a fact it does not give, so its curve is not the same fact recalled. Pick a "
                  "fact both models know."
            for name, (token, p) in tops.items() if token.strip() != answer.strip()}


def peaks(traces: dict) -> dict[str, Peak | None]:
    """name -> the named peak of its curve (None: none worth naming), for figures.tracing.depth_comparison."""
    traces = jsons_of(traces)
    return {name: curve(name, r).peak for name, r in traces.items()}
