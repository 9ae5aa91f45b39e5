"""An evaluation's work as independent items, run in this process or on a Ray cluster (editkit/runtime/cluster.py).

A `Run` is one method at its complete hyperparameters, with its own results file (one JSON line per record,
named by evaluate.results_path). Its work is one item per batch of records not yet in that file: edit the batch and
measure each record after the edit (`edit_batch`). Those items need each record's pre-edit measurement, so first
come the items that measure, in batches, the records missing from the shared pre file (`measure_batch`).

Items carry all they need (records, typed hyperparameters, pre-edit measurements) and editkit draws no shared random
numbers, so a worker computes what the serial loop computes. The calling process writes every line as its item
finishes (cluster.run_items' `done`), whichever worker computed it: one writer per file, and a rerun resumes from
every finished item. In process the items run in order, which is the serial loop (a method's batches one after
the other, the methods one after the other).
"""
from __future__ import annotations

import json
import os
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..core.progress import part
from ..runtime.cluster import Backend, Item, run_items
from .measure import EvalSpec, edit_and_measure, measure


@dataclass
class Run:
    """One method at its complete hyperparameters (an Hparams), its results file, and the prefix of its items'
    progress messages (default: the method)."""

    method: str
    hp: object
    path: Path
    label: str = ""


@dataclass
class Outcome:
    """Each run's rows in record order, the records edited now, and the target-reuse counts (reuse only)."""

    rows: list[list[dict]]
    computed: int = 0
    reused: dict | None = field(default=None)


def measure_batch(lm, records, n_gen: int, gen_tokens: int, greedy_tokens: int) -> list[dict]:
    """The pre-edit measurement of each record (measure.measure)."""
    return [measure(lm, rec, n_gen, gen_tokens, greedy_tokens) for rec in records]


def edit_batch(lm, method: str, records, hp, spec: EvalSpec, pre: list[dict], reuse: bool = False,
               progress=None) -> dict:
    """Edit `records` in one batch and measure them (measure.edit_and_measure); the rows as the results file keeps
    them. With `reuse`, target vectors are memoized (editing/memo.py; on disk, so the workers sharing a cache reuse
    one another's). {"rows": [...], "reused": [hits, misses] or None}."""
    from ..editing.memo import reuse_targets

    with reuse_targets() if reuse else nullcontext() as memo:
        out = edit_and_measure(lm, method, records, hp, spec, pre=pre, progress=progress)
    rows = []
    for rec, row in zip(records, out):
        row = {"key": str(rec.request.case_id), **{k: v for k, v in row.items() if k != "pre"}}
        post = row.pop("post")
        row["post_generations"] = post["generations"]
        row["post_greedy"] = post.get("greedy")
        rows.append(row)
    return {"rows": rows, "reused": None if memo is None else [memo.hits, memo.misses]}


def read_rows(path: Path, keep=None) -> dict:
    """The rows of a results file by key (the last one of a key; with `keep`, the last one `keep(row)` accepts); a
    line cut by an interruption is skipped (its record is recomputed)."""
    done = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                if keep is None or keep(row):
                    done[row["key"]] = row
            except (ValueError, KeyError, TypeError):
                continue
    return done


def append_row(path: Path, row: dict) -> None:
    """One line more, on disk before this returns (an interruption loses at most the line being written; a line
    an interruption cut short is ended first, so the new one is not glued to it)."""
    cut = False
    if path.exists() and path.stat().st_size:
        with path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            cut = f.read(1) != b"\n"
    with path.open("a", encoding="utf-8") as f:
        f.write(("\n" if cut else "") + json.dumps(row, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _key(rec) -> str:
    return str(rec.request.case_id)


def execute(lm, runs: list[Run], records, spec: EvalSpec, pre_path: Path, backend: Backend | None = None,
            progress=None, reuse: bool = False,
            finished: Callable[[int, list[dict]], None] | None = None) -> Outcome:
    """Every run over `records` in batches of spec.batch, resuming from the results files; `finished(r, rows)` is
    called here as run r's last batch is written (a sweep caches the setting's summary then)."""
    backend = backend or Backend()
    chunks = [records[i:i + spec.batch] for i in range(0, len(records), spec.batch)]
    done = [read_rows(run.path) for run in runs]
    todo = [(r, c) for r in range(len(runs)) for c in range(len(chunks))
            if not all(_key(rec) in done[r] for rec in chunks[c])]
    pre_done = read_rows(pre_path)
    needed = list(dict.fromkeys(_key(rec) for _, c in todo for rec in chunks[c] if _key(rec) not in pre_done))
    by_key = {_key(rec): rec for rec in records}
    missing = [by_key[k] for k in needed]
    pre_batches = [missing[i:i + spec.batch] for i in range(0, len(missing), spec.batch)]
    gen = (spec.n_gen, spec.gen_tokens, spec.greedy_tokens)
    n_items = len(pre_batches) + len(todo)
    split = len(pre_batches) / n_items if n_items else 0.0

    def measured(i: int, result: list[dict]) -> None:
        for rec, meas in zip(pre_batches[i], result):
            pre_done[_key(rec)] = {"key": _key(rec), "pre": meas}
            append_row(pre_path, pre_done[_key(rec)])

    run_items(lm, [Item(measure_batch, (recs, *gen), label=f"pre-edit measurement of {len(recs)} record(s)")
                   for recs in pre_batches], backend, part(progress, 0.0, split) if progress else None,
              done=measured)
    if backend.ray and todo:
        _prepare(lm, {id(runs[r].hp): runs[r].hp for r, _ in todo}.values())
    left = [sum(1 for r2, _ in todo if r2 == r) for r in range(len(runs))]
    reused = [0, 0]

    def written(j: int, result: dict) -> None:
        r, c = todo[j]
        for row in result["rows"]:
            append_row(runs[r].path, row)
            done[r][row["key"]] = row
        if result["reused"]:
            reused[0] += result["reused"][0]
            reused[1] += result["reused"][1]
        left[r] -= 1
        if not left[r] and finished:
            finished(r, _rows(done[r], records))

    items = []
    for r, c in todo:
        run, recs = runs[r], chunks[c]
        start = c * spec.batch
        label = f"{run.label or run.method}: records {start + 1}-{start + len(recs)} of {len(records)}"
        items.append(Item(edit_batch, (run.method, recs, run.hp, spec, [pre_done[_key(x)]["pre"] for x in recs],
                                       reuse), label=label, progress=True))
    run_items(lm, items, backend, part(progress, split, 1.0) if progress else None, done=written)
    for r in range(len(runs)):
        if finished and not any(r2 == r for r2, _ in todo):
            finished(r, _rows(done[r], records))  # nothing left to do: complete from the file
    return Outcome([_rows(d, records) for d in done], sum(len(chunks[c]) for _, c in todo),
                   {"hits": reused[0], "misses": reused[1]} if reuse else None)


def _rows(done: dict, records) -> list[dict]:
    return [done[_key(rec)] for rec in records]


def _prepare(lm, hps) -> None:
    """What the first edits compute and cache (second-moment statistics, context templates), here, once, before
    the workers start: otherwise each worker would compute the same statistics at the same time."""
    from ..editing.run import prepare_first_use

    prepare_first_use(lm, list(hps))
