"""How long adding a fact takes on this machine: what each kind of part took when this machine last computed
it (every build records its parts), the first-use statistics it will compute first (their passes, size and
time), and how busy the machine is now. The Lesson page's "Add a fact" estimate and the build's countdown
start here.

Each kind of part, in order of trust: 1. how long it took when this machine last computed it for the pack's
model with these settings (remember(): every build records its parts, first-use statistics left out), scaled
from how busy the machine was then to now; 2. not computed here yet: its COST (the idle benchmark, the
embedded model's), scaled by how much slower or faster the parts timed here were once they cover SCALE_FROM of
a fact (a cancelled build's logit lens alone, 8 s under load against the benchmark's 0.5 s, made a 3-minute
fact 48 minutes); before that, for another model than the embedded one, scaled to the time the pack's own
facts recorded when they were computed (on the machine that built it), else unscaled and said to be the
embedded model's; and scaled to how busy the machine is now. The first-use statistics (a one-time cost, left
out of the parts' timings) are added where this machine's cache lacks them: each pass timed by the statistics
of the same model cached here, else by COST's statistics_layer."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from ..core.cache import Store, digest
from ..core.progress import duration
from . import compute
from .pack import built_on, edit_name, retrace_name

# the seconds of each unit of work on the embedded model with today's default settings (fast traces, 5-sample
# re-traces), from the idle benchmark of a new fact (benchmarks/lesson_settings.py and `editkit bench report
# --skip ...`: 2 cores, statistics cached; the median of six builds, 27 Nov 2026 06:47-07:20;
# docs/results/speed.md): the estimate's reference until this machine has timed its own parts (measured()),
# and the units' weights in the progress estimate. statistics_layer: the seconds of a first-use statistics
# pass per layer it runs through (a pass stops after its highest layer), 20,000 WikiText tokens of the
# embedded model (docs/results/speed.md, first use)
COST = {"check": 1.0, "lens": 0.4, "trace": 26.3, "memories": 2.9, "edit": 11.8, "bleed": 1.8, "ripple": 2.4,
        "sweep_layer": 1.9, "statistics_layer": 6.0}
REFERENCE = "editkit's benchmark of a new fact on an idle 2-core machine (27 Nov 2026)"
REFERENCE_TOKENS = 20000  # the token count of COST's statistics_layer
TIMES = Store("timings")  # timings/lesson/<model>: how long each kind of part last took on this machine
SCALE_FROM = 0.2  # the share of a fact's COST the parts timed here must cover to scale the others by them


def cores() -> int:
    return os.cpu_count() or 1


def others_now() -> float:
    """The machine's other work now: its 1-minute load average (runnable threads), 0 where it has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def busy(others: float) -> float:
    """How many times longer a computation that keeps every core busy takes beside `others` runnable threads
    than on an idle machine: the cores are shared among its threads and theirs, (cores + others) / cores."""
    return (cores() + max(others, 0.0)) / cores()


def remember(model: str, s: compute.Settings, kind: str, seconds: float, others: float | None = None) -> None:
    """Record how long a part of `kind` took on this machine (the cache's timings/lesson/<model>), first-use
    statistics left out, with how busy the machine was (`others`: the load average beside the build, default
    the load average now less the build's own threads): the next estimate of a fact on this model, with these
    settings, starts from it."""
    if not kind:
        return
    if others is None:
        others = max(others_now() - cores(), 0.0)
    path = TIMES.path(model, within="lesson")
    entries = TIMES.get(path) or {}
    entries[kind] = {"seconds": round(max(seconds, 0.0), 2), "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
                     "settings": digest(s.to_dict()), "others": round(others, 2)}
    TIMES.put(path, entries)


def measured(model: str, s: compute.Settings) -> dict[str, dict]:
    """kind -> {"seconds", "when", "others"}: how long each kind of part took when this machine last computed
    it for `model` with the settings `s` (remember())."""
    key = digest(s.to_dict())
    return {k: v for k, v in (TIMES.get(TIMES.path(model, within="lesson")) or {}).items()
            if isinstance(v, dict) and v.get("settings") == key
            and isinstance(v.get("seconds"), (int, float))}


def _day(when: str) -> str:
    try:
        return time.strftime("%d %b %Y, %H:%M", time.strptime(when, "%Y-%m-%dT%H:%M:%S")).lstrip("0")
    except (TypeError, ValueError):
        return "an unknown time"


def parts(n_targets: int, methods: list[str], n_layers: int) -> dict[str, tuple[int, float]]:
    """kind -> (how many, COST of one) of one fact's units with `n_targets` new targets (build.plan's units,
    and the known-fact check before them)."""
    out = {"check": (1, COST["check"]), "lens": (1, COST["lens"]), "trace": (1, COST["trace"]),
           "memories": (1, COST["memories"]), "sweep": (1, COST["sweep_layer"] * n_layers)}
    out.update({f"edit {m}": (n_targets, COST["edit"]) for m in methods})
    out.update({"bleed": (n_targets, COST["bleed"]), "ripple": (n_targets, COST["ripple"])})
    return out


@dataclass
class Rates:
    """The seconds one part of each kind takes now on this machine (`seconds`), what they rest on (`how`), and
    the factor for how busy the machine is now (`busy`, already in `seconds`)."""

    seconds: dict[str, float]
    how: str
    busy: float = 1.0
    timed: dict[str, dict] = field(default_factory=dict)  # the kinds this machine has timed (measured())


def rates(pack, s: compute.Settings | None = None, others: float | None = None) -> Rates:
    """Rates for adding a fact to `pack` with the settings `s` (default: the pack's settings for new facts),
    beside `others` runnable threads (default: the load average now). The module docstring has the order of
    trust."""
    from ..model.loading import DEFAULT_MODEL

    methods = list(pack.manifest.get("method_names") or ["rome"])
    n_layers = int(pack.manifest.get("layers", 18))
    s = s or compute.Settings.for_new_facts(pack.manifest.get("settings"))
    kinds = parts(1, methods, n_layers)
    timed = {k: v for k, v in measured(pack.model, s).items() if k in kinds}
    now = busy(others_now() if others is None else others)
    have = {k: v["seconds"] / busy(v.get("others", 0.0)) for k, v in timed.items()}  # as on an idle machine
    reference = sum(n * cost for n, cost in kinds.values())
    covered = sum(kinds[k][0] * kinds[k][1] for k in have)
    if have and covered >= SCALE_FROM * reference:
        rate, basis = sum(kinds[k][0] * t for k, t in have.items()) / covered, None
    else:
        own = None if pack.model == DEFAULT_MODEL else _packs_own(pack, 1)
        rate, basis = (own[0] / reference, own[1]) if own else (1.0, f"from {REFERENCE}" + (
            "" if pack.model == DEFAULT_MODEL else f" for the embedded model ({pack.model} was never timed)"))
    seconds = {k: now * (have[k] if k in have else rate * cost) for k, (_, cost) in kinds.items()}
    if not have:
        return Rates(seconds, f"{basis}; nothing was computed on this server yet", now, timed)
    when = max(v["when"] for v in timed.values())
    how = f"from how long each part took when this server last computed it, on {_day(when)}"
    if len(have) < len(kinds) - 1:  # the known-fact check is not a unit: never timed on its own
        how += (f"; {len(have)} of the {len(kinds) - 1} kinds of part were computed here, the others are "
                + ("scaled from them" if basis is None else basis))
    return Rates(seconds, how, now, timed)


def busy_words(r: Rates) -> str:
    """What the estimate assumes about the machine's other work, in words ("" on an idle machine)."""
    if r.busy < 1.05:
        return ""
    return (f"; the machine is busy now (load average {others_now():.1f} on {cores()} cores), so each part "
            f"is expected to take {r.busy:.1f} times as long as on an idle machine")


def statistics(pack, per_unit: list[tuple[str, list[int] | None]]) -> list[dict]:
    """The first-use statistics passes a build will compute before the units `per_unit` ((method, layers or
    None for its own) of each edit, in order) can edit, with each pass's seconds now (on this machine, else
    COST's) and size: [{"module", "positions", "tokens", "layers", "methods", "seconds", "bytes", "unit": the
    index in `per_unit` of the edit that computes it}]. A layer a pass computes is not counted again by a
    later unit."""
    n_layers = int(pack.manifest.get("layers", 18))
    width = _key_width(pack)
    out: list[dict] = []
    seen: set = set()
    for k, (method, layers) in enumerate(per_unit):
        for p in compute.statistics_needed(pack.model, method, layers):
            new = [l for l in p["layers"] if (p["module"], p["positions"], p["tokens"], l) not in seen]
            if not new:
                continue
            seen.update((p["module"], p["positions"], p["tokens"], l) for l in new)
            one = {**p, "layers": new, "methods": [method], "unit": k}
            timed = compute.statistics_seconds(pack.model, n_layers, one)
            one["seconds"] = timed if timed is not None else \
                COST["statistics_layer"] * (max(new) + 1) * p["tokens"] / REFERENCE_TOKENS
            one["timed_here"] = timed is not None
            one["bytes"] = len(new) * width * width * 4 if width and p["module"] == "down_proj" else None
            out.append(one)
    return out


def _key_width(pack) -> int | None:
    """The width of the FFN's keys (d_ff: the statistics are d_ff x d_ff float32), from a fact's step 4."""
    for fid in pack.fact_ids[:1]:
        return (pack.part(fid, "memories") or {}).get("d_ff")
    return None


def edits_of(methods: list[str], n_targets: int,
             sweep_layers: list[int]) -> list[tuple[str, list[int] | None]]:
    """The edits a fact's build makes, in the build's order, as `statistics` reads them: each method's edit
    per target, then ROME at every layer of the sweep (whose statistics one pass prepares)."""
    return [(m, None) for _ in range(n_targets) for m in methods] + [("rome", list(sweep_layers))]


@dataclass
class Estimate:
    """How long adding a fact will take (`seconds`, the first-use statistics included), the first-use
    statistics passes still to compute (`statistics`, their share `statistics_seconds`), when its first steps
    open (`first_steps_seconds`: the known-fact check, the logit lens and the traces), and what the times rest
    on."""

    seconds: float
    statistics: list[dict]
    statistics_seconds: float
    first_steps_seconds: float
    rates: Rates

    @property
    def how(self) -> str:
        """What the parts' times rest on and how busy the machine is, in words."""
        return self.rates.how + busy_words(self.rates)

    def statistics_words(self) -> str:
        """The first-use statistics with their size ("" when this machine has them)."""
        return statistics_words(self.statistics)


def estimate_fact(pack, n_targets: int, settings: compute.Settings | None = None,
                  others: float | None = None) -> Estimate:
    """The Estimate of adding one fact with `n_targets` new targets to `pack`, computed with `settings`
    (default: the pack's settings for new facts), beside `others` runnable threads (default: the load average
    now)."""
    s = settings or compute.Settings.for_new_facts(pack.manifest.get("settings"))
    r = rates(pack, s, others)
    methods = list(pack.manifest.get("method_names") or ["rome"])
    n_layers = int(pack.manifest.get("layers", 18))
    seconds = sum(n * r.seconds[k] for k, (n, _) in parts(n_targets, methods, n_layers).items())
    first = statistics(pack, edits_of(methods, n_targets, compute.sweep_layer_list(s, n_layers)))
    extra = r.busy * sum(p["seconds"] for p in first)
    first_steps = r.seconds["check"] + r.seconds["lens"] + r.seconds["trace"]
    return Estimate(seconds + extra, first, extra, first_steps, r)


def estimate(pack, n_targets: int, settings: compute.Settings | None = None,
             others: float | None = None) -> tuple[float, str]:
    """(seconds, what it is based on) of estimate_fact, in words: the parts' basis, how busy the machine is
    and the first-use statistics with their size and time."""
    e = estimate_fact(pack, n_targets, settings, others)
    stats = e.statistics_words()
    return e.seconds, e.how + (f"; including about {duration(e.statistics_seconds)} for {stats}" if stats else "")


def statistics_words(first: list[dict]) -> str:
    """The first-use statistics a build still computes, with their size ("" when none)."""
    if not first:
        return ""
    layers = sorted({layer for p in first for layer in p["layers"]})
    tokens = " / ".join(f"{t:,}" for t in sorted({p["tokens"] for p in first}))
    size = sum(p["bytes"] or 0 for p in first)
    basis = "timed by the statistics this server has" if all(p["timed_here"] for p in first) else \
        "timed by editkit's benchmark of a first use"
    return (f"the model's first-use statistics, computed once on this server ({len(layers)} layer"
            f"{'s' if len(layers) > 1 else ''} × {tokens} WikiText tokens in {len(first)} pass"
            f"{'es' if len(first) > 1 else ''}" + (f", {size / 1e6:,.0f} MB in the cache" if size else "")
            + f"), {basis}")


def _packs_own(pack, n_targets: int) -> tuple[float, str] | None:
    """The time the pack's own facts took when they were computed (the seconds each trace, edit, re-trace and
    layer of the sweep recorded), averaged per fact and scaled to the targets; None when no fact recorded
    them."""
    fixed, per_target = [], []
    for fid in pack.fact_ids:
        fact, trace, sweep = pack.fact(fid), pack.part(fid, "trace"), pack.part(fid, "sweep")
        targets = len(fact.get("targets", [])) or 1
        done = [pack.part(fid, n) for t in range(targets) for m in pack.manifest.get("method_names", [])
                for n in (edit_name(t, m), retrace_name(t, m))]
        if not (trace and sweep) or any(p is None or p.get("seconds") is None for p in done):
            continue
        fixed.append(sum(t.get("seconds", 0) for t in trace["traces"].values())
                     + sum(r.get("seconds", 0) for r in sweep["rows"]))
        per_target.append((sum(p["seconds"] for p in done) + COST["bleed"] + COST["ripple"]) / targets)
    if not fixed:
        return None
    seconds = sum(fixed) / len(fixed) + n_targets * sum(per_target) / len(per_target)
    facts, them = f"fact{'s' if len(fixed) > 1 else ''}", "them" if len(fixed) > 1 else "it"
    return seconds, (f"as long as this pack's {len(fixed)} {facts} took to compute on the machine that built "
                     f"{them}{built_on(pack.manifest)}")
