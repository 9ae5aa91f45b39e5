"""Build (or extend) a class pack: every result the lesson shows, for each fact of a facts file (pack.py has the
format, compute.py the computations).

    build("facts.json", "my-pack", model="gemma-3-270m", progress=print_bar)

The facts are read and checked first (bad files stop before the model loads), then the model checks that it knows
each fact (refused with what it predicts instead), then every missing part is computed, fact by fact, each written
atomically as soon as it is done: a rerun (or a run adding facts) skips every finished part. Progress reports the
part being computed and an estimate of the time left (from the measured speed of the parts done so far).

Publishing: a fact's folder is its staging place. The pack serves the facts its manifest lists, and a fact is added
to the manifest (one atomic rewrite) only once every part of it is written, so a build that is cancelled, fails or
is killed never shows a half-built fact to the students; its finished parts stay in the unlisted folder and the
next build of the same fact computes only what is missing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..core.cache import Store, digest
from ..core.errors import EditkitError
from ..core.progress import duration, gives_time, silent, time_left
from ..core.progress import part as part_of
from ..editing import stats
from . import carry, compute
from .facts import LessonFact, read_facts, refusal
from .pack import (
    FORMAT,
    KIND,
    MANIFEST,
    bleed_name,
    built_on,
    edit_name,
    editkit_version,
    read_json,
    retrace_name,
    ripple_name,
    write_json,
)

# the seconds of each unit of work on the embedded model with today's default settings (fast traces, 5-sample
# re-traces), from the idle benchmark of a new fact (benchmarks/lesson_settings.py and `editkit bench report --skip
# ...`: 2 cores, statistics cached; the median of six builds, 27 Nov 2026 06:47-07:20; docs/results/speed.md): the
# estimate's reference until this machine has timed its own parts (measured()), and the units' weights in the
# progress estimate
COST = {"check": 1.0, "lens": 0.4, "trace": 26.3, "memories": 2.9, "edit": 11.8, "bleed": 1.8, "ripple": 2.4,
        "sweep_layer": 1.9}
REFERENCE = "editkit's benchmark of a new fact on an idle 2-core machine (27 Nov 2026)"
TIMES = Store("timings")  # timings/lesson/<model>: how long each kind of part last took on this machine


@dataclass
class Unit:
    """One piece of work for one fact: the files it writes and how to compute them."""

    fact: str  # fact id
    what: str  # "trace", "edit rome -> ' Rome'", ...
    files: tuple[str, ...]  # part names it writes
    cost: float
    run: object  # run(lm, progress) -> {part name: value}
    after_trace: bool = False  # reads the fact's stored trace: computed once the trace is written
    kind: str = ""  # what its timing is recorded as: "trace", "edit rome", ... (measured())

    def done(self, folder: Path) -> bool:
        return all(read_json(folder / "facts" / self.fact / f"{name}.json") is not None for name in self.files)


def plan(fid: str, fact: LessonFact, folder: Path, methods: list[str], s: compute.Settings,
         n_layers: int) -> list[Unit]:
    """The units of one fact, in the order the steps need them (the trace before the memories and the sweep)."""
    record, r = fact.record, fact.request
    answer = r.target_true
    where = folder / "facts" / fid

    def trace_of(lm):  # the stored MLP trace (computed by the "trace" unit before)
        stored = read_json(where / "trace.json")
        return stored["traces"]["mlp"]

    pre: dict = {}  # each target's measurement before the edit, taken once for all methods (in this process)

    def pre_of(lm, rec, t):
        if t not in pre:
            pre[t] = compute.pre_measure(lm, rec, s)
        return pre[t]

    units = [
        Unit(fid, "logit lens", ("lens",), COST["lens"],
             lambda lm, p: {"lens": compute.lens(lm, r.rewrite, answer, s.lens_k)}, kind="lens"),
        Unit(fid, "causal traces and severing", ("trace",), COST["trace"],
             lambda lm, p: {"trace": compute.traces(lm, r.rewrite, r.subject, answer, s, progress=p)},
             kind="trace"),
        Unit(fid, "FFN memories at the traced peak", ("memories",), COST["memories"],
             lambda lm, p: {"memories": compute.memories_at_peak(lm, r.rewrite, trace_of(lm), s)}, True,
             kind="memories"),
    ]
    for t, target in enumerate(fact.targets):
        rec = compute.with_target(record, target)
        for m in methods:
            def edit_unit(lm, p, rec=rec, m=m, t=t):
                result, delta = compute.edit(lm, m, rec, s, part_of(p, 0, 0.7), pre_of(lm, rec, t))
                retraced = compute.retrace(lm, rec, delta, s, progress=part_of(p, 0.7, 1.0, "re-trace: "))
                return {edit_name(t, m): result, retrace_name(t, m): retraced}

            units.append(Unit(fid, f"{m} edit to {target.strip()!r} and its re-trace",
                              (edit_name(t, m), retrace_name(t, m)), COST["edit"], edit_unit,
                              kind=f"edit {m}"))
        units.append(Unit(fid, f"bleed map of the ROME edit to {target.strip()!r}", (bleed_name(t),), COST["bleed"],
                          lambda lm, p, rec=rec, t=t: {bleed_name(t): compute.bleed(lm, rec, s, progress=p)},
                          kind="bleed"))
        units.append(Unit(fid, f"ripple effects of the ROME edit to {target.strip()!r}", (ripple_name(t),),
                          COST["ripple"], lambda lm, p, rec=rec, t=t: {ripple_name(t): compute.ripple(lm, rec,
                                                                                                     progress=p)},
                          kind="ripple"))
    first = compute.with_target(record, fact.targets[0])
    units.append(Unit(fid, "layer sweep (ROME at every layer)", ("sweep",), COST["sweep_layer"] * n_layers,
                      lambda lm, p: {"sweep": compute.layer_sweep(lm, first, trace_of(lm), s, progress=p)}, True,
                      kind="sweep"))
    return units


class Clock:
    """Progress over weighted units with a time estimate: from `rate` (seconds per unit of COST, what the page
    promised before the run) until a quarter of the work is done, then from the units computed in this run."""

    def __init__(self, progress, total: float, rate: float | None = None):
        self.progress, self.total, self.done, self.start = progress, max(total, 1e-9), 0.0, time.perf_counter()
        self.computed, self.spent, self.rate = 0.0, 0.0, rate

    def seconds(self, remaining: float) -> float | None:
        """Seconds for `remaining` units of COST: the promised rate, then this run's once it has measured enough."""
        measured = self.computed > 0 and self.spent >= 1
        if measured and (self.computed >= 0.25 * self.total or self.rate is None):
            return remaining * self.spent / self.computed
        return None if self.rate is None else remaining * self.rate

    def left(self, remaining: float) -> str:
        s = self.seconds(remaining)
        return "estimating the time left" if s is None else time_left(s)

    def after(self, remaining: float) -> str:
        """What follows a part that gives its own time left (first-use statistics, which COST leaves out): the
        parts after it, so the two estimates add up instead of contradicting each other."""
        if remaining <= 1e-9:
            return "the last part"
        s = self.seconds(remaining)
        return "then the other parts" if s is None else f"then {duration(s)} for the other parts"

    def unit(self, cost: float, label: str):
        """The progress callback for one unit; call finish() after it."""
        started, base = time.perf_counter(), self.done

        def step(f: float, message: str = "") -> None:
            remaining = self.total - base - cost * min(max(f, 0.0), 1.0)
            when = self.after(self.total - base - cost) if gives_time(message) else self.left(remaining)
            self.progress(min((base + cost * min(max(f, 0.0), 1.0)) / self.total, 1.0),
                          f"{label}{': ' + message if message else ''} ({when})")

        def finish(computed: bool) -> None:
            self.done = base + cost
            if computed:
                self.computed += cost
                self.spent += time.perf_counter() - started

        return step, finish


def _open(folder: Path, ident: dict, s: compute.Settings, methods: list[str], facts) -> dict:
    """The pack's manifest: a new one, or the existing one after checking it is the same model and methods. A new
    pack goes into an empty folder (or one holding only the facts file). Settings are recorded per fact (each
    fact.json says what it was computed with; _check_settings); the manifest's are the latest build's, the defaults
    the page adds facts with. A pack from before per-fact settings gets its settings copied into its facts."""
    manifest = read_json(folder / MANIFEST)
    if manifest is None:
        source = Path(facts).resolve() if isinstance(facts, (str, Path)) else None
        if folder.exists() and any(p.resolve() != source for p in folder.iterdir()):
            raise EditkitError(f"{folder} exists and is not a lesson pack; give an empty or new folder")
        return {"kind": KIND, "format": FORMAT, **ident, "editkit_version": editkit_version(),
                "settings": s.to_dict(), "methods": compute.methods(), "method_names": methods, "facts": [],
                "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if manifest.get("kind") != KIND or manifest.get("format") != FORMAT:
        raise EditkitError(f"{folder} holds a pack of another format; give a new folder")
    if manifest.get("model") != ident["model"] or manifest.get("fingerprint") != ident["fingerprint"]:
        raise EditkitError(f"{folder} was built on {manifest.get('model')} (weights {manifest.get('fingerprint')}); "
                           f"this run uses {ident['model']} (weights {ident['fingerprint']}): give another folder")
    if manifest.get("method_names") != methods:
        raise EditkitError(f"{folder} was built with other settings or methods ({manifest.get('method_names')}); "
                           "give another folder, or the same options")
    before = compute.Settings.from_dict(manifest.get("settings")).to_dict()
    for fid in manifest.get("facts", []):
        stored = read_json(folder / "facts" / fid / "fact.json")
        if stored is not None and "settings" not in stored:
            write_json(folder / "facts" / fid / "fact.json", {**stored, "settings": before})
    manifest["settings"] = s.to_dict()
    return manifest


def _check_settings(folder: Path, fid: str, s: compute.Settings) -> None:
    """A fact is computed with one set of settings: resuming it with others is refused."""
    stored = read_json(folder / "facts" / fid / "fact.json")
    if stored is None:
        return
    was, now = compute.Settings.from_dict(stored.get("settings")).to_dict(), s.to_dict()
    if was != now:
        differ = ", ".join(f"{k} {was[k]!r} (now {now[k]!r})" for k in was if was[k] != now[k])
        raise EditkitError(f"{fid} in {folder} was started with other settings: {differ}; give the same options "
                           "(lesson build --help), or another folder")


def run_unit(lm, facts, position: int, fid: str, folder: str, methods: list[str], settings: dict, index: int,
             progress=None) -> dict:
    """A work item (cluster.Item): unit `index` of the plan of the fact at `position` of `facts`, computed where it
    runs; {part name: value}, rounded as the pack stores it. The caller writes the parts."""
    fact = read_facts(facts)[position]
    unit = plan(fid, fact, Path(folder), methods, compute.Settings.from_dict(settings), lm.adapter.n_layers)[index]
    with compute.shared_targets():
        return {name: compute.rounded(value) for name, value in unit.run(lm, progress or silent).items()}


def _on_cluster(lm, facts, folder: Path, methods: list[str], s: compute.Settings, todo: list, backend, say) -> None:
    """Every unit of `todo` ((position, fact id, index, Unit)) as a work item on Ray, in two rounds: the units that
    read a stored trace after every trace is written. Each item's parts are written here as it finishes, so a
    rerun skips them, whichever worker made them. The workers read the pack folder in the second round (one
    machine, or a folder every node sees, like the cache)."""
    from ..runtime.cluster import Item, run_items

    source = str(Path(facts).resolve()) if isinstance(facts, (str, Path)) else facts
    total = sum(u.cost for *_, u in todo) or 1.0
    start = 0.0
    for late in (False, True):
        rnd = [(pos, fid, i, u) for pos, fid, i, u in todo if u.after_trace == late and not u.done(folder)]
        if not rnd:
            continue
        share = sum(u.cost for *_, u in rnd) / total
        items = [Item(run_unit, (source, pos, fid, str(folder), methods, s.to_dict(), i), label=f"{fid}: {u.what}",
                      progress=True) for pos, fid, i, u in rnd]

        def done(k: int, parts: dict, rnd=rnd) -> None:
            for name, value in parts.items():
                write_json(folder / "facts" / rnd[k][1] / f"{name}.json", value)

        run_items(lm, items, backend, part_of(say, start, start + share), done=done)
        start += share


def build(facts, out, model: str | None = None, methods=None, settings: compute.Settings | None = None,
          progress=None, lm=None, backend=None, keep_statistics: bool = False) -> dict:
    """Compute every missing part of the pack `out` for `facts` (a file path, or a list of record dicts).
    `lm`: an already loaded model (the page); else `model` is loaded (default: the embedded model). Returns a
    summary: the pack folder, its facts, what was computed and skipped, the seconds and the size on disk.
    `methods`: default every registered method (ROME first: the lesson's edit, bleed map and sweep use it).
    `backend`: a Ray cluster.Backend fans the units out (one item per unit, _on_cluster); default in process.
    `keep_statistics`: copy the model's statistics into the pack (carry.py), so that the pack moved to another
    machine adds facts without computing them again; a pack that carries them restores them first."""
    say = progress or (lambda f, m: None)
    s = settings or compute.Settings()
    if methods is None:
        names = [m["name"] for m in compute.methods()]
        methods = ["rome"] + [n for n in names if n != "rome"]
    methods = compute.check_methods(list(methods))
    if not methods or methods[0] != "rome":
        raise EditkitError("the methods must start with rome (the lesson's edit, bleed map and layer sweep)")
    lesson_facts = read_facts(facts)  # bad files fail here, before the model loads
    folder = Path(out).expanduser()
    if folder.exists() and not folder.is_dir():
        raise EditkitError(f"{folder} is a file; give a folder for the pack")
    existing = read_json(folder / MANIFEST)
    if lm is None:
        name = model or (existing or {}).get("model") or "gemma-3-270m"
        say(0.0, f"loading {name}")
        lm = compute.load(name)
    elif model and model != lm.name:
        raise EditkitError(f"the loaded model is {lm.name}, not {model}")
    start = time.perf_counter()
    say(0.0, "checking that the model knows each fact")
    with compute.session(lm):
        checks = [compute.known(lm, f.request.rewrite, f.request.target_true) for f in lesson_facts]
    refused = [refusal(f, c) for f, c in zip(lesson_facts, checks) if not c["known"]]
    if refused:
        raise EditkitError("; ".join(refused))
    ident = compute.identity(lm)
    manifest = _open(folder, ident, s, methods, facts)
    if read_json(folder / MANIFEST) is None:
        write_json(folder / MANIFEST, manifest)  # the folder is a pack from now on (with no fact yet)
    restored = carry.restore(lm.name, folder)  # the statistics a pack carries (checked: the same weights)
    ids = _fact_ids(folder, manifest, lesson_facts)
    plans = [plan(fid, fact, folder, methods, s, lm.adapter.n_layers) for fid, fact in zip(ids, lesson_facts)]
    for fid, units in zip(ids, plans):
        if not all(u.done(folder) for u in units):  # a complete fact keeps the settings it was built with
            _check_settings(folder, fid, s)
    for fid, fact, check in zip(ids, lesson_facts, checks):
        if read_json(folder / "facts" / fid / "fact.json") is None:
            write_json(folder / "facts" / fid / "fact.json", compute.rounded(
                {"id": fid, "key": fact.key, **fact.to_dict(), "known": check, "settings": s.to_dict()}))
    # a fact is listed in the manifest (served to students) only once every part is computed: publish()
    entries = [(pos, fid, i, u) for pos, (fid, units) in enumerate(zip(ids, plans)) for i, u in enumerate(units)]
    units = [u for *_, u in entries]
    was_done = [u.done(folder) for u in units]
    todo = [u for u, done in zip(units, was_done) if not done]

    def publish_finished() -> None:
        publish(folder, [f for f in ids if all(u.done(folder) for u in units if u.fact == f)])

    publish_finished()  # facts already complete (a rerun after an interruption)
    if backend is not None and backend.ray:
        _on_cluster(lm, facts, folder, methods, s, [e for e in entries if not e[3].done(folder)], backend, say)
        todo = []  # computed on the cluster
    clock = Clock(say, sum(u.cost for u in todo), _rate(folder, methods, lm.adapter.n_layers, s))
    profile = []  # per computed part: seconds and CPU seconds (this process)
    with compute.shared_targets():  # ROME's targets serve its edit, bleed map and sweep row; MEMIT's AlphaEdit's
        for i, u in enumerate(todo):
            step, finish = clock.unit(u.cost, f"[{i + 1}/{len(todo)}] {u.fact}: {u.what}")
            step(0.0)
            if u.done(folder):  # another process finished it meanwhile
                finish(False)
                continue
            t0, c0, s0 = time.perf_counter(), time.process_time(), stats.spent()
            for name, value in u.run(lm, step).items():
                write_json(folder / "facts" / u.fact / f"{name}.json", compute.rounded(value))
            first_use = stats.spent() - s0  # first-use statistics computed inside it (a one-time cost)
            profile.append({"fact": u.fact, "part": u.what, "seconds": round(time.perf_counter() - t0, 2),
                            "cpu_seconds": round(time.process_time() - c0, 2),
                            "statistics_seconds": round(first_use, 2)})
            remember(lm.name, s, u.kind, time.perf_counter() - t0 - first_use)
            finish(True)
            if all(v.done(folder) for v in units if v.fact == u.fact):
                publish(folder, [u.fact])
    publish_finished()
    if keep_statistics:
        carry.keep(lm.name, folder)
    say(1.0, "pack complete")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    computed = sum(not done for done in was_done)
    return {"pack": str(folder), "model": lm.name, "fingerprint": ident["fingerprint"], "facts": ids,
            "parts": len(units), "computed": computed, "skipped": len(units) - computed,
            "seconds": round(time.perf_counter() - start, 1), "bytes": size, "profile": profile,
            "restored": restored}


def publish(folder: Path, fids: list[str]) -> None:
    """List finished facts in the pack's manifest (read afresh: another build may have published meanwhile), in
    one atomic rewrite: from then on every student is served them."""
    manifest = read_json(folder / MANIFEST)
    new = [f for f in fids if f not in manifest["facts"]]
    if new:
        manifest["facts"] += new
        manifest["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        write_json(folder / MANIFEST, manifest)


def _parts(n_targets: int, methods: list[str], n_layers: int) -> dict[str, tuple[int, float]]:
    """kind -> (how many, COST of one) of one fact's units with `n_targets` new targets (plan()'s units, and the
    known-fact check before them)."""
    out = {"check": (1, COST["check"]), "lens": (1, COST["lens"]), "trace": (1, COST["trace"]),
           "memories": (1, COST["memories"]), "sweep": (1, COST["sweep_layer"] * n_layers)}
    out.update({f"edit {m}": (n_targets, COST["edit"]) for m in methods})
    out.update({"bleed": (n_targets, COST["bleed"]), "ripple": (n_targets, COST["ripple"])})
    return out


def _cost(n_targets: int, n_methods: int, n_layers: int) -> float:
    """The COST of one fact with `n_targets` new targets (its plan's units)."""
    return sum(n * c for n, c in _parts(n_targets, [str(i) for i in range(n_methods)], n_layers).values())


def _rate(folder: Path, methods: list[str], n_layers: int, s: compute.Settings | None = None) -> float | None:
    """Seconds per unit of COST that `estimate` assumes for this pack (None for a pack without facts yet)."""
    from .pack import Pack

    try:
        pack = Pack.open(folder)
    except EditkitError:
        return None
    if not pack.fact_ids:
        return None
    return estimate(pack, 1, s)[0] / _cost(1, len(methods), n_layers)


def remember(model: str, s: compute.Settings, kind: str, seconds: float) -> None:
    """Record how long a part of `kind` took on this machine (the cache's timings/lesson/<model>), first-use
    statistics left out: the next estimate of a fact on this model, with these settings, starts from it."""
    if not kind:
        return
    path = TIMES.path(model, within="lesson")
    entries = TIMES.get(path) or {}
    entries[kind] = {"seconds": round(max(seconds, 0.0), 2), "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
                     "settings": digest(s.to_dict())}
    TIMES.put(path, entries)


def measured(model: str, s: compute.Settings) -> dict[str, dict]:
    """kind -> {"seconds", "when"}: how long each kind of part took when this machine last computed it for `model`
    with the settings `s` (remember())."""
    key = digest(s.to_dict())
    return {k: v for k, v in (TIMES.get(TIMES.path(model, within="lesson")) or {}).items()
            if isinstance(v, dict) and v.get("settings") == key and isinstance(v.get("seconds"), (int, float))}


def _day(when: str) -> str:
    try:
        return time.strftime("%d %b %Y, %H:%M", time.strptime(when, "%Y-%m-%dT%H:%M:%S")).lstrip("0")
    except (TypeError, ValueError):
        return "an unknown time"


SCALE_FROM = 0.2  # the share of a fact's COST the parts timed here must cover before the others are scaled by them


def estimate(pack, n_targets: int, settings: compute.Settings | None = None) -> tuple[float, str]:
    """(seconds, what it is based on) to add one fact with `n_targets` new targets to `pack`, computed with
    `settings` (default: the pack's settings for new facts). Each kind of part, in order of trust:
    1. how long it took when this machine last computed it for the pack's model with these settings (remember():
       every build records its parts, first-use statistics left out);
    2. not computed here yet: its COST (the idle benchmark, the embedded model's), scaled by how much slower or
       faster the parts timed here were once they cover SCALE_FROM of a fact (a cancelled build's logit lens
       alone, 8 s under load against the benchmark's 0.5 s, made a 3-minute fact 48 minutes); before that, for
       another model than the embedded one, scaled to the time the pack's own facts recorded when they were
       computed (on the machine that built it), else unscaled and said to be the embedded model's."""
    from ..model.loading import DEFAULT_MODEL

    methods = list(pack.manifest.get("method_names") or ["rome"])
    n_layers = int(pack.manifest.get("layers", 18))
    s = settings or compute.Settings.for_new_facts(pack.manifest.get("settings"))
    parts = _parts(n_targets, methods, n_layers)
    have = {k: v["seconds"] for k, v in measured(pack.model, s).items() if k in parts}
    when = max((v["when"] for k, v in measured(pack.model, s).items() if k in parts), default="")
    reference = sum(n * cost for n, cost in parts.values())
    covered = sum(parts[k][0] * parts[k][1] for k in have)
    if have and covered >= SCALE_FROM * reference:
        rate, basis = sum(parts[k][0] * t for k, t in have.items()) / covered, None
    else:
        own = None if pack.model == DEFAULT_MODEL else _packs_own(pack, n_targets)
        rate, basis = (own[0] / reference, own[1]) if own else (1.0, f"from {REFERENCE}" + (
            "" if pack.model == DEFAULT_MODEL else f" for the embedded model ({pack.model} was never timed)"))
    seconds = sum(n * (have[k] if k in have else rate * cost) for k, (n, cost) in parts.items())
    if not have:
        return seconds, f"{basis}; nothing was computed on this server yet"
    how = f"from how long each part took when this server last computed it, on {_day(when)}"
    if len(have) < len(parts) - 1:  # the known-fact check is not a unit: never timed on its own
        how += (f"; {len(have)} of the {len(parts) - 1} kinds of part were computed here, the others are "
                + ("scaled from them" if basis is None else basis))
    return seconds, how


def _packs_own(pack, n_targets: int) -> tuple[float, str] | None:
    """The time the pack's own facts took when they were computed (the seconds each trace, edit, re-trace and layer
    of the sweep recorded), averaged per fact and scaled to the targets; None when no fact recorded them."""
    fixed, per_target = [], []
    for fid in pack.fact_ids:
        fact, trace, sweep = pack.fact(fid), pack.part(fid, "trace"), pack.part(fid, "sweep")
        targets = len(fact.get("targets", [])) or 1
        parts = [pack.part(fid, n) for t in range(targets) for m in pack.manifest.get("method_names", [])
                 for n in (edit_name(t, m), retrace_name(t, m))]
        if not (trace and sweep) or any(p is None or p.get("seconds") is None for p in parts):
            continue
        fixed.append(sum(t.get("seconds", 0) for t in trace["traces"].values())
                     + sum(r.get("seconds", 0) for r in sweep["rows"]))
        per_target.append((sum(p["seconds"] for p in parts) + COST["bleed"] + COST["ripple"]) / targets)
    if not fixed:
        return None
    seconds = sum(fixed) / len(fixed) + n_targets * sum(per_target) / len(per_target)
    return seconds, (f"as long as this pack's {len(fixed)} fact{'s' if len(fixed) > 1 else ''} took to compute on "
                     f"the machine that built {'them' if len(fixed) > 1 else 'it'}{built_on(pack.manifest)}")


def _fact_ids(folder: Path, manifest: dict, facts: list[LessonFact]) -> list[str]:
    """Each fact's folder: the one already holding the same fact (same key), else a new one."""
    by_key = {}
    for fid in manifest["facts"]:
        stored = read_json(folder / "facts" / fid / "fact.json") or {}
        by_key[stored.get("key")] = fid
    out = []
    for f in facts:
        fid = by_key.get(f.key) or f.slug()
        if fid in out:
            raise EditkitError(f"{f.where}: the same fact twice")
        out.append(fid)
    return out
