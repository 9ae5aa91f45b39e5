"""Build (or extend) a class pack: every result the lesson shows, for each fact of a facts file (pack.py has the
format, compute.py the computations).

    build("facts.json", "my-pack", model="gemma-3-270m", progress=print_bar)

The facts are read and checked first (bad files stop before the model loads), then the model checks that it knows
each fact (refused with what it predicts instead), then every missing part is computed, fact by fact, in the order
the steps open (plan), each written atomically as soon as it is done: a rerun (or a run adding facts) skips every
finished part. Progress reports the part being computed and the time left (building.Clock: each part's expected
seconds on this machine now, timing.py, the first-use statistics included, corrected as the parts finish).

Publishing: a fact's folder is its staging place. While a fact is built its status (building.py) tells the Lesson
page which parts are written and when the others are expected; students are served the fact once the parts of its
first steps are written (pack.FIRST), each later step opening as its parts land. The fact is added to the manifest
(one atomic rewrite) once every part of it is written. A build that is cancelled or fails removes the status, and
one that is killed stops beating, so its fact is withdrawn and never served half-built again; its finished parts
stay in the unlisted folder and the next build of the same fact computes only what is missing.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import EditkitError
from ..core.progress import part as part_of
from ..core.progress import silent
from ..editing import stats
from . import carry, compute, timing
from .building import Clock, Status
from .facts import LessonFact, read_facts, refusal
from .pack import (
    FIRST,
    FORMAT,
    KIND,
    MANIFEST,
    Pack,
    bleed_name,
    edit_name,
    editkit_version,
    read_json,
    retrace_name,
    ripple_name,
    step_parts,
    write_json,
)

COST = timing.COST  # the units' weights (timing.py: the idle benchmark's seconds of each kind of part)


@dataclass
class Unit:
    """One piece of work for one fact: the files it writes and how to compute them."""

    fact: str  # fact id
    what: str  # "trace", "edit rome -> ' Rome'", ...
    files: tuple[str, ...]  # part names it writes
    cost: float
    run: object  # run(lm, progress) -> {part name: value}
    after_trace: bool = False  # reads the fact's stored trace: computed once the trace is written
    kind: str = ""  # what its timing is recorded as: "trace", "edit rome", ... (timing.measured())
    target: int | None = None  # the new target number it edits to (None: the fact's own parts, the sweep's first)
    edits: tuple[str, tuple[int, ...] | None] | None = None  # (method, layers) of its edit: its first-use statistics

    def done(self, folder: Path) -> bool:
        return all(read_json(folder / "facts" / self.fact / f"{name}.json") is not None for name in self.files)


def plan(fid: str, fact: LessonFact, folder: Path, methods: list[str], s: compute.Settings,
         n_layers: int) -> list[Unit]:
    """The units of one fact, in the order its steps open (first_step): the first target's steps one after another
    (the logit lens, the traces, the memories, ROME's edit, the other methods', the bleed map, the layer sweep, the
    ripple effects), then each further target's edits, bleed map and ripple effects. The memories and the sweep read
    the stored trace, computed before them."""
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
        units += _target_units(fid, t, target, compute.with_target(record, target), methods, s, pre_of)
    first = compute.with_target(record, fact.targets[0])
    units.append(Unit(fid, "layer sweep (ROME at every layer)", ("sweep",), COST["sweep_layer"] * n_layers,
                      lambda lm, p: {"sweep": compute.layer_sweep(lm, first, trace_of(lm), s, progress=p)}, True,
                      kind="sweep", edits=("rome", tuple(compute.sweep_layer_list(s, n_layers)))))
    return sorted(units, key=lambda u: (u.target or 0, first_step(u, methods)))


def _target_units(fid: str, t: int, target: str, rec, methods: list[str], s: compute.Settings,
                  pre_of) -> list[Unit]:
    """The units of one new target: each method's edit with its re-trace, the bleed map and the ripple effects."""
    units = []
    for m in methods:
        def edit_unit(lm, p, m=m):
            result, delta = compute.edit(lm, m, rec, s, part_of(p, 0, 0.7), pre_of(lm, rec, t))
            retraced = compute.retrace(lm, rec, delta, s, progress=part_of(p, 0.7, 1.0, "re-trace: "))
            return {edit_name(t, m): result, retrace_name(t, m): retraced}

        units.append(Unit(fid, f"{m} edit to {target.strip()!r} and its re-trace",
                          (edit_name(t, m), retrace_name(t, m)), COST["edit"], edit_unit, kind=f"edit {m}",
                          target=t, edits=(m, None)))
    units.append(Unit(fid, f"bleed map of the ROME edit to {target.strip()!r}", (bleed_name(t),), COST["bleed"],
                      lambda lm, p: {bleed_name(t): compute.bleed(lm, rec, s, progress=p)}, kind="bleed", target=t,
                      edits=("rome", None)))
    units.append(Unit(fid, f"ripple effects of the ROME edit to {target.strip()!r}", (ripple_name(t),),
                      COST["ripple"], lambda lm, p: {ripple_name(t): compute.ripple(lm, rec, progress=p)},
                      kind="ripple", target=t, edits=("rome", None)))
    return units


def first_step(u: Unit, methods: list[str]) -> int:
    """The first step a unit's parts open (for its target); 12 for a part no step shows."""
    return min([n for n in range(1, 12) if set(u.files) & set(step_parts(n, u.target or 0, methods))] or [12])


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
    summary: the pack folder, its facts, what was computed and skipped, the seconds and the size on disk, each
    computed part's seconds (expected and spent) and, per fact, when each step opened (seconds from the start).
    `methods`: default every registered method (ROME first: the lesson's edit, bleed map and sweep use it).
    `backend`: a Ray cluster.Backend fans the units out (one item per unit, _on_cluster); default in process.
    `keep_statistics`: copy the model's statistics into the pack (carry.py), so that the pack moved to another
    machine adds facts without computing them again; a pack that carries them restores them first."""
    say = progress or (lambda f, m: None)
    s = settings or compute.Settings()
    methods = _methods(methods)
    lesson_facts = read_facts(facts)  # bad files fail here, before the model loads
    folder = Path(out).expanduser()
    if folder.exists() and not folder.is_dir():
        raise EditkitError(f"{folder} is a file; give a folder for the pack")
    lm = _model(lm, model, folder, say)
    start = time.perf_counter()
    ids, plans = _prepare(lm, lesson_facts, folder, facts, methods, s, say)
    restored = carry.restore(lm.name, folder)  # the statistics a pack carries (checked: the same weights)
    entries = [(pos, fid, i, u) for pos, (fid, units) in enumerate(zip(ids, plans)) for i, u in enumerate(units)]
    units = [u for *_, u in entries]
    was_done = [u.done(folder) for u in units]
    _publish_finished(folder, ids, units)  # facts already complete (a rerun after an interruption)
    todo = [u for u, done in zip(units, was_done) if not done]
    if backend is not None and backend.ray:
        _on_cluster(lm, facts, folder, methods, s, [e for e in entries if not e[3].done(folder)], backend, say)
        todo = []  # computed on the cluster
    keys = {fid: f.key for fid, f in zip(ids, lesson_facts)}
    profile, opened = _compute(lm, folder, todo, units, keys, methods, s, say, start)
    _publish_finished(folder, ids, units)
    if keep_statistics:
        carry.keep(lm.name, folder)
    say(1.0, "pack complete")
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    computed = sum(not done for done in was_done)
    return {"pack": str(folder), "model": lm.name, "fingerprint": read_json(folder / MANIFEST)["fingerprint"],
            "facts": ids, "parts": len(units), "computed": computed, "skipped": len(units) - computed,
            "seconds": round(time.perf_counter() - start, 1), "bytes": size, "profile": profile,
            "opened": opened, "restored": restored}


def _methods(methods) -> list[str]:
    if methods is None:
        names = [m["name"] for m in compute.methods()]
        methods = ["rome"] + [n for n in names if n != "rome"]
    methods = compute.check_methods(list(methods))
    if not methods or methods[0] != "rome":
        raise EditkitError("the methods must start with rome (the lesson's edit, bleed map and layer sweep)")
    return methods


def _model(lm, model: str | None, folder: Path, say):
    """The loaded model (`lm`), or `model` loaded (default: the pack's, else the embedded one)."""
    if lm is None:
        name = model or (read_json(folder / MANIFEST) or {}).get("model") or "gemma-3-270m"
        say(0.0, f"loading {name}")
        return compute.load(name)
    if model and model != lm.name:
        raise EditkitError(f"the loaded model is {lm.name}, not {model}")
    return lm


def _prepare(lm, lesson_facts, folder: Path, facts, methods: list[str], s: compute.Settings, say):
    """The known-fact checks (refused with what the model predicts), the pack's manifest and each fact's folder:
    (fact ids, each fact's plan)."""
    say(0.0, "checking that the model knows each fact")
    with compute.session(lm):
        checks = [compute.known(lm, f.request.rewrite, f.request.target_true) for f in lesson_facts]
    refused = [refusal(f, c) for f, c in zip(lesson_facts, checks) if not c["known"]]
    if refused:
        raise EditkitError("; ".join(refused))
    manifest = _open(folder, compute.identity(lm), s, methods, facts)
    if read_json(folder / MANIFEST) is None:
        write_json(folder / MANIFEST, manifest)  # the folder is a pack from now on (with no fact yet)
    ids = _fact_ids(folder, manifest, lesson_facts)
    plans = [plan(fid, fact, folder, methods, s, lm.adapter.n_layers) for fid, fact in zip(ids, lesson_facts)]
    for fid, units in zip(ids, plans):
        if not all(u.done(folder) for u in units):  # a complete fact keeps the settings it was built with
            _check_settings(folder, fid, s)
    for fid, fact, check in zip(ids, lesson_facts, checks):
        if read_json(folder / "facts" / fid / "fact.json") is None:
            write_json(folder / "facts" / fid / "fact.json", compute.rounded(
                {"id": fid, "key": fact.key, **fact.to_dict(), "known": check, "settings": s.to_dict()}))
    return ids, plans


def expected_seconds(folder: Path, todo: list[Unit], s: compute.Settings, methods: list[str]) -> list[float]:
    """Each unit's expected seconds on this machine now (timing.rates), with the first-use statistics the first
    unit that needs them computes (timing.statistics)."""
    pack = Pack.open(folder)
    r = timing.rates(pack, s)
    out = [r.seconds.get(u.kind, r.busy * u.cost) for u in todo]
    editing = [i for i, u in enumerate(todo) if u.edits is not None]
    edits = [(todo[i].edits[0], None if todo[i].edits[1] is None else list(todo[i].edits[1])) for i in editing]
    for p in timing.statistics(pack, edits):
        out[editing[p["unit"]]] += r.busy * p["seconds"]
    return out


def _compute(lm, folder: Path, todo: list[Unit], units: list[Unit], keys: dict, methods: list[str],
             s: compute.Settings, say, start: float) -> tuple[list[dict], dict]:
    """Compute the units `todo` in order, each fact's status (building.Status) kept while it is built and removed
    when it is published or the build stops; (the profile of the computed parts, when each fact's steps opened)."""
    clock = Clock(say, expected_seconds(folder, todo, s, methods), [f"[{i + 1}/{len(todo)}] {u.fact}: {u.what}"
                                                                    for i, u in enumerate(todo)])
    statuses = {fid: Status(folder, fid, keys.get(fid, ""), [(i, u.what, u.files, u.target) for i, u in
                                                             enumerate(todo) if u.fact == fid], methods, clock)
                for fid in dict.fromkeys(u.fact for u in todo)}
    profile: list[dict] = []
    try:
        for status in statuses.values():
            status.open()
        with compute.shared_targets():  # ROME's targets serve its edit, bleed map and sweep row; MEMIT's AlphaEdit's
            for i, u in enumerate(todo):
                _run(lm, folder, u, i, clock, statuses[u.fact], s, profile)
                if all(v.done(folder) for v in units if v.fact == u.fact):
                    publish(folder, [u.fact])
                    statuses[u.fact].close()
    finally:
        for status in statuses.values():
            status.close()  # published, cancelled or failed: no status is left behind
    return profile, _opened(folder, todo, clock, methods, start)


def _run(lm, folder: Path, u: Unit, i: int, clock: Clock, status: Status, s: compute.Settings,
         profile: list[dict]) -> None:
    """One unit: computed and written (unless another process finished it meanwhile), timed, its status updated."""
    step, finish = clock.unit(i)
    status.write()
    step(0.0)
    if u.done(folder):  # another process finished it meanwhile
        finish(False)
        return
    t0, c0, s0 = time.perf_counter(), time.process_time(), stats.spent()
    for name, value in u.run(lm, step).items():
        write_json(folder / "facts" / u.fact / f"{name}.json", compute.rounded(value))
    first_use = stats.spent() - s0  # first-use statistics computed inside it (a one-time cost)
    spent = time.perf_counter() - t0
    profile.append({"fact": u.fact, "part": u.what, "seconds": round(spent, 2),
                    "expected_seconds": round(clock.expected[i], 1),
                    "cpu_seconds": round(time.process_time() - c0, 2), "statistics_seconds": round(first_use, 2)})
    timing.remember(lm.name, s, u.kind, spent - first_use)
    finish(True)
    status.write()


def _opened(folder: Path, todo: list[Unit], clock: Clock, methods: list[str], start: float) -> dict:
    """fact -> {"visible": seconds from the start until students were served it (pack.FIRST written), step: seconds
    until the step opened (its first target's parts written)}; 0 for what was written before this build."""
    begun = time.time() - (time.perf_counter() - start)  # the build's start on the wall clock
    written = {(u.fact, f): clock.finished_at.get(i, begun) - begun for i, u in enumerate(todo) for f in u.files}
    out: dict = {}
    for fid in dict.fromkeys(u.fact for u in todo):
        def at(names) -> float:
            return round(max([written.get((fid, p), 0.0) for p in names] + [0.0]), 1)

        out[fid] = {"visible": at(FIRST), **{n: at(step_parts(n, 0, methods)) for n in range(1, 12)}}
    return out


def _publish_finished(folder: Path, ids: list[str], units: list[Unit]) -> None:
    publish(folder, [f for f in ids if all(u.done(folder) for u in units if u.fact == f)])


def publish(folder: Path, fids: list[str]) -> None:
    """List finished facts in the pack's manifest (read afresh: another build may have published meanwhile), each
    with the time it was built ("built"), in one atomic rewrite: from then on every student is served them."""
    manifest = read_json(folder / MANIFEST)
    new = [f for f in fids if f not in manifest["facts"]]
    if new:
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        manifest["facts"] += new
        manifest["built"] = {**manifest.get("built", {}), **{f: now for f in new}}
        manifest["updated"] = now
        write_json(folder / MANIFEST, manifest)


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
