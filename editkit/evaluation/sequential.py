"""Lifelong (sequential) editing: batch after batch of edits, each computed at the weights the earlier ones left.

    sequential(lm, "alphaedit", load_eval_set("counterfact", 500), spec=SequentialSpec(batch=25))

For every registered method. Batch b is computed by run_edit inside `weights.applied(lm, total)`, total = the sum of
the deltas of batches 1..b-1 (context-local: the shared weights are never written), and a stateful method
(AlphaEdit: the keys of the earlier edits) gets the SequenceState the previous batch returned. ROME takes its
requests one after another anyway; run it with batch 1.

Right after each batch, its own edits are checked (did the rewrite prompt flip?: `took`). At every checkpoint (every
`eval_every` edits, and after the last batch), at the weights with all edits so far:
- efficacy, generalization, specificity: the CounterFact rates (metrics.compare: P(new) > P(true) on the rewrite
  and paraphrase prompts, P(true) > P(new) on the neighborhood prompts), averaged over records;
- retention: of the earlier edits (before this batch) that took right after their batch, the share whose rewrite
  prompt still prefers the new target;
- fluency: ROME's weighted bi-/tri-gram entropy of sampled continuations (top-k 5, fixed seed) of fixed prompts
  (FLUENCY_PROMPTS: neutral text, none of them about an edited subject; the measures: lifelong_measures.py);
- perplexity on the first `ppl_tokens` tokens of WikiText-2's test split, and its ratio to the unedited model's;
- ||Delta W||_F / ||W||_F of the accumulated update per edited matrix, the largest, and over all of them together.
Measuring every edit at every checkpoint grows quadratically, so at intermediate checkpoints a fixed random sample
of the edits so far (`sample` of them; a permutation fixed by `seed`, so the same edits are followed as long as they
are in it) stands for all of them; the last checkpoint measures every edit. Each row says which (`measured`,
`sampled`). `collapsed` is set, with the reason, when perplexity exceeds `collapse_factor` x the base perplexity or
retention falls below `retention_floor` (Gupta et al. 2024; EasyEdit issue #18: ROME's "editing capacity is around
100").

Several methods (`sequential_methods`) are independent: one after another in this process, or in parallel on the
workers of a Ray cluster (editkit/runtime/cluster.py), each sequence serial.

Resumable: after every batch the accumulated deltas, the sequence state, the rows and the per-edit results are
written to one cache entry (editkit/core/cache.py), keyed by the weights the run starts from (fingerprint), the method,
its hyperparameters, the records and every setting; a rerun continues after the last completed batch.
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from ..core.cache import Store, digest
from ..core.errors import EditkitError
from ..core.results import JsonObject, Result, frame
from ..editing.defaults import load_hparams
from ..editing.methods import get
from ..editing.run import run_edit
from ..editing.sequence import SequenceState
from ..figures.lifelong import lifelong_figure
from ..model.weights import applied, combined, fingerprint
from ..runtime.cluster import Backend, Item, run_items
from .datasets import as_record
from .lifelong_measures import (
    FLUENCY_PROMPTS,
    FLUENCY_TOKENS,
    GROUPS,
    PPL_TOKENS,
    fluency,
    perplexity,
    rates,
    update_norms,
)

STORE = Store("sequential", version=1)


@dataclass(frozen=True)
class SequentialSpec:
    """How one lifelong-editing run edits and measures (module docstring): `batch` requests per edit; a checkpoint
    every `eval_every` edits (None: every batch; a multiple of `batch`), measuring a fixed random `sample` of the
    edits so far (None: all; the permutation and the fluency samples fixed by `seed`), perplexity on `ppl_tokens`
    WikiText tokens and fluency of `fluency_tokens` tokens per prompt of `fluency_prompts`; a checkpoint is
    `collapsed` above `collapse_factor` x the base perplexity or below `retention_floor`. `stop_after` ends a call
    after that many batches (the run stays resumable); `finalize` then measures every edit applied so far."""

    batch: int = 1
    eval_every: int | None = None
    sample: int | None = 50
    seed: int = 0
    ppl_tokens: int = PPL_TOKENS
    fluency_prompts: tuple[str, ...] = FLUENCY_PROMPTS
    fluency_tokens: int = FLUENCY_TOKENS
    collapse_factor: float = 2.0
    retention_floor: float = 0.5
    stop_after: int | None = None
    finalize: bool = False

    @property
    def every(self) -> int:
        """Edits between checkpoints (every batch unless `eval_every` says otherwise)."""
        return self.batch if self.eval_every is None else self.eval_every

    def check(self) -> None:
        """A clear error for settings no run can have."""
        if self.batch < 1 or self.every < 1 or self.every % self.batch:
            raise EditkitError("batch and eval_every must be at least 1, and eval_every a multiple of batch")
        if (self.collapse_factor <= 1 or not 0 <= self.retention_floor <= 1 or self.ppl_tokens < 2
                or (self.sample is not None and self.sample < 1)):
            raise EditkitError("collapse_factor must exceed 1, retention_floor lie in [0, 1], ppl_tokens be >= 2 "
                               "and sample >= 1")


@dataclass
class LifelongRun(Result):
    """One method's lifelong run (module docstring): its settings, the unedited model's measurements (`base`), one
    row per checkpoint (`rows`: edit count, rates, retention, fluency, perplexity, norms, whether it collapsed and
    why), how far it got, its edit times, and where it first collapsed. What `evaluate --sequential` writes per
    method and assets/results/lifelong-*.json ship; `label` and `color` name it in figures."""

    model: str
    method: str
    label: str
    n: int
    batch: int
    eval_every: int
    sample: int | None
    seed: int
    ppl_tokens: int
    fluency_prompts: list[str]
    fluency_tokens: int
    collapse_factor: float
    retention_floor: float
    hparams: dict
    base: dict
    base_perplexity: float
    rows: list[dict]
    batches_done: int
    batches: int
    complete: bool
    resumed_at_batch: int
    edit_seconds: list[float]
    collapsed_at: int | None
    checkpoint: str
    partial_final: dict | None
    notes: str
    color: str | None = None

    @property
    def last(self) -> dict | None:
        """The last measurement: a stopped run's full one when it has it, else the last checkpoint."""
        return self.partial_final or (self.rows[-1] if self.rows else None)

    def headline(self) -> str:
        last = self.last or {}
        collapse = f", collapsed at edit {self.collapsed_at}" if self.collapsed_at else ""
        return (f"{self.label}: {last.get('edit', 0)} of {self.n} edits in batches of {self.batch}, efficacy "
                f"{last.get('efficacy') or float('nan'):.2f}, perplexity x{last.get('perplexity_ratio') or 0:.2f}"
                f"{collapse}")

    def to_json(self) -> JsonObject:
        d = asdict(self)
        if self.color is None:
            d.pop("color")
        return d

    @classmethod
    def _from_json(cls, d: dict) -> "LifelongRun":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_frame(self):
        """One row per checkpoint (per-matrix norms and condition numbers left out: see `rows`)."""
        return frame([{k: v for k, v in r.items() if k not in ("relative_norm", "condition")} for r in self.rows])

    def figure(self):
        """One panel per metric over the edits so far (hollow markers: checkpoints measured on a sample)."""
        return lifelong_figure({self.method: self.to_json()})


def _mean(values):
    values = [v for v in values if v is not None and not math.isnan(v)]
    return sum(values) / len(values) if values else None


# --- the checkpoint ------------------------------------------------------------------------------------------------

def _write(tmp: Path, value: dict) -> None:
    from safetensors.torch import save_file

    tensors = {f"delta.{k}": v.detach().contiguous().cpu() for k, v in value["total"].items()}
    header = {}
    if value["state"] is not None:
        st, header = value["state"].to_tensors()
        tensors.update(st)
    meta = {"progress": json.dumps(value["progress"]), "state": json.dumps(header)}
    if not tensors:
        tensors["empty"] = torch.zeros(1)
    save_file(tensors, str(tmp), metadata=meta)


def _read(path: Path) -> dict:
    """A checkpoint, on the CPU (the caller moves the deltas to the model's device: a failure there must not make
    the store delete the checkpoint as unreadable)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        tensors = {k: f.get_tensor(k).clone() for k in f.keys()}
        meta = f.metadata()
    header = json.loads(meta["state"])
    return {"total": {k[6:]: v for k, v in tensors.items() if k.startswith("delta.")},
            "state": SequenceState.from_tensors(tensors, header) if header else None,
            "progress": json.loads(meta["progress"])}


# --- the run -------------------------------------------------------------------------------------------------

def sequential(lm, method: str, requests, hparams: dict | None = None, spec: SequentialSpec = SequentialSpec(),
               cache: bool = True, progress=None) -> LifelongRun:
    """Apply `requests` (EvalRecords, EditRequests or request dicts) with `method` in batches of `spec.batch`, each
    at the weights the earlier batches left; measure at every checkpoint (module docstring, SequentialSpec).
    A run continues from its saved checkpoint (cache=False starts over). With `spec.finalize`, a run that stops
    before its end measures every edit applied so far (returned as "partial_final", not stored: a later call
    continues the run as if it had not stopped)."""
    records = [as_record(r) for r in requests]
    m = get(method)
    if not records:
        raise EditkitError("no requests to apply")
    spec.check()
    batch, eval_every, sample, seed = spec.batch, spec.every, spec.sample, spec.seed
    if not m.batch and batch != 1:
        raise EditkitError(f"{m.label} edits one request after another; run it with batch 1 (and eval_every)")
    hp = load_hparams(m.name, lm, hparams)
    n_batches = -(-len(records) // batch)
    settings = {"method": m.name, "hparams": hp.to_dict(), "cases": digest([r.source or r.request.case_id
                                                                               for r in records]),
                "n": len(records), "batch": batch, "eval_every": eval_every, "sample": sample, "seed": seed,
                "ppl_tokens": spec.ppl_tokens, "fluency": [list(spec.fluency_prompts), spec.fluency_tokens],
                "weights": fingerprint(lm)}
    path = STORE.path(m.name, ".safetensors", within=lm.name, **settings)
    order = list(range(len(records)))
    random.Random(seed).shuffle(order)  # the fixed random sample: the first `sample` edits so far in this order
    saved = STORE.get(path, _read) if cache else None
    if saved is not None:  # a run saved on one device resumes on another; SequenceState keeps its keys on the CPU
        total = {k: v.to(lm.device) for k, v in saved["total"].items()}
        state, prog = saved["state"], saved["progress"]
    else:
        total, state, prog = {}, None, _start(lm, records, order, spec)
    run = _Run(records, order, spec, prog)
    resumed_at = prog["done"]
    stopped = 0
    for b in range(prog["done"], n_batches):
        if spec.stop_after is not None and stopped >= spec.stop_after:
            break
        if progress:
            progress(b / n_batches, f"batch {b + 1}/{n_batches}")
        total, state = _edit_batch(lm, m.name, hp, run, b, n_batches, total, state)
        STORE.put(path, {"total": total, "state": state, "progress": prog}, _write)
        stopped += 1
    if progress:
        progress(prog["done"] / n_batches, f"{prog['done']}/{n_batches} batches")
    rows = prog["rows"]
    partial = None
    if spec.finalize and 0 < prog["done"] < n_batches:
        with applied(lm, total):
            partial = _checkpoint(lm, run, prog["done"] - 1, prog["done"] * batch, 0.0, total, None)
    first_collapse = next((r["edit"] for r in rows if r["collapsed"]), None)
    return LifelongRun(lm.name, m.name, m.label, len(records), batch, eval_every, sample, seed, spec.ppl_tokens,
                       list(spec.fluency_prompts), spec.fluency_tokens, spec.collapse_factor, spec.retention_floor,
                       hp.to_dict(), prog["base"], prog["base"]["perplexity"], rows, prog["done"], n_batches,
                       prog["done"] == n_batches, resumed_at, prog.get("edit_seconds", []), first_collapse,
                       str(path), partial, notes(sample, batch, eval_every))


def sequential_methods(lm, plans: dict, requests, cache: bool = True, progress=None,
                       backend: Backend | None = None) -> dict[str, LifelongRun]:
    """Several methods' lifelong runs on the same requests: `plans` = {method: (hparams overrides or None,
    SequentialSpec)}; returns {method: sequential(...)} in the order of `plans`. Each run is one work item
    (editkit/runtime/cluster.py): one after another in this process, or in parallel on Ray workers, each
    sequence serial on its worker and checkpointed after every batch in the editkit cache as always (a shared
    $EDITKIT_CACHE on a cluster), so a rerun, or the item run again after its worker died, continues from the
    last batch."""
    backend = backend or Backend()
    records = [as_record(r) for r in requests]
    for method, (overrides, spec) in plans.items():  # bad methods, settings or hyperparameters fail first
        spec.check()
        load_hparams(get(method).name, lm, overrides)
    if backend.ray:  # the statistics and templates every first edit needs, once, before the workers start
        from ..editing.run import prepare_first_use

        prepare_first_use(lm, [load_hparams(get(m).name, lm, hp) for m, (hp, _spec) in plans.items()])
    items = [Item(sequential, (method, records, overrides, spec), {"cache": cache}, label=get(method).label,
                  progress=True) for method, (overrides, spec) in plans.items()]
    return dict(zip(plans, run_items(lm, items, backend, progress)))


@dataclass
class _Run:
    """One run's records, their fixed random order, its settings and its progress (the checkpoint's JSON part)."""

    records: list
    order: list[int]
    spec: SequentialSpec
    prog: dict


def _start(lm, records: list, order: list[int], spec: SequentialSpec) -> dict:
    """A new run's progress: nothing done yet, and the unedited model's measurements (its base perplexity,
    fluency and rates on the first sampled edits, and its neighborhood answers, which the drifts compare with)."""
    with applied(lm, {}):
        base_ppl = perplexity(lm, spec.ppl_tokens)
        base_flu = fluency(lm, spec.fluency_prompts, spec.fluency_tokens, spec.seed)
        first = [records[i] for i in order[:spec.sample or len(records)]]
        pre = rates(lm, first)
        original = [r["answers"] for r in rates(lm, records, ("neighborhood",))]  # before the first edit
    return {"done": 0, "rows": [], "took": {}, "original": original, "base": {
        "perplexity": base_ppl, "fluency": base_flu, "measured": len(first),
        **{k: _mean([r[g] for r in pre]) for k, g in zip(("efficacy", "generalization", "specificity"), GROUPS)}}}


def _edit_batch(lm, method: str, hp, run: _Run, b: int, n_batches: int, total: dict,
                state: SequenceState | None) -> tuple[dict, SequenceState | None]:
    """Batch b edited at the weights `total` the earlier batches left; whether each of its edits took, and a
    checkpoint where one falls, recorded in run.prog. Returns the accumulated deltas and the sequence state."""
    spec, prog = run.spec, run.prog
    chunk = run.records[b * spec.batch:(b + 1) * spec.batch]
    t0 = time.perf_counter()
    with applied(lm, total):
        result = run_edit(lm, method, [r.request for r in chunk], hp, state=state)
    seconds = time.perf_counter() - t0
    total = combined([total, result.delta]) if total else {k: v.clone() for k, v in result.delta.items()}
    done = (b + 1) * spec.batch if b + 1 < n_batches else len(run.records)
    with applied(lm, total):
        now = rates(lm, chunk, ("rewrite",))
        for i in range(len(chunk)):
            prog["took"][str(b * spec.batch + i)] = now[i]["rewrite"] == 1.0
        if done % spec.every == 0 or b + 1 == n_batches:
            prog["rows"].append(_checkpoint(lm, run, b, done, seconds, total, spec.sample))
    prog["done"] = b + 1
    prog.setdefault("edit_seconds", []).append(round(seconds, 2))
    return total, result.state


def _checkpoint(lm, run: _Run, b: int, done: int, seconds: float, total: dict, sample: int | None) -> dict:
    """The measurements after batch b (edits 0..done-1 applied), at the current weights; `sample` caps the edits
    measured before the last checkpoint (None: every edit so far)."""
    records, spec, prog = run.records, run.spec, run.prog
    last = done == len(records)
    chosen = [i for i in run.order if i < done]
    if sample is not None and not last:  # (sample None: every edit so far)
        chosen = chosen[:sample]
    chosen.sort()
    original = prog.get("original")  # None in runs checkpointed before the original answers were kept
    measured = rates(lm, [records[i] for i in chosen], original=original and [original[i] for i in chosen])
    start = b * spec.batch
    earlier = [(i, r) for i, r in zip(chosen, measured) if i < start and prog["took"].get(str(i))]
    retention = _mean([1.0 if r["rewrite"] == 1.0 else 0.0 for _, r in earlier]) if earlier else None
    ppl = perplexity(lm, spec.ppl_tokens)
    base = prog["base"]
    reasons = []
    if ppl > spec.collapse_factor * base["perplexity"]:
        reasons.append(f"perplexity {ppl:.1f} > {spec.collapse_factor:g} x base {base['perplexity']:.1f}")
    if retention is not None and retention < spec.retention_floor:
        reasons.append(f"only {retention:.0%} of the earlier successful edits still hold")
    this = [prog["took"][str(start + i)] for i in range(done - start)]
    return {"edit": done, "batch": b + 1, "case_id": records[done - 1].request.case_id, "seconds": round(seconds, 2),
            "measured": len(chosen), "sampled": len(chosen) < done,
            "efficacy": _mean([r["rewrite"] for r in measured]),
            "generalization": _mean([r["paraphrase"] for r in measured]),
            "specificity": _mean([r["neighborhood"] for r in measured]),
            "kept": _mean([r.get("kept") for r in measured]), "locality": _mean([r.get("locality") for r in measured]),
            "took": sum(this) / len(this), "retention": retention,
            "fluency": fluency(lm, spec.fluency_prompts, spec.fluency_tokens, spec.seed), "perplexity": ppl,
            "perplexity_ratio": ppl / base["perplexity"], **update_norms(lm, total), "collapsed": bool(reasons),
            "reason": "; ".join(reasons)}


def notes(sample, batch, eval_every) -> str:
    where = ("every edit so far is measured at every checkpoint" if sample is None else
             f"intermediate checkpoints measure a fixed random sample of at most {sample} of the edits so far (a "
             "permutation fixed by the seed); the last checkpoint measures every edit")
    return (f"batches of {batch}, checkpoints every {eval_every} edits; {where}. Rates are CounterFact's "
            "(P(new) > P(true) on rewrite/paraphrase prompts, P(true) > P(new) on neighborhood prompts, from mean "
            "per-token NLLs), averaged over records; against the ORIGINAL model (its neighborhood answers cached "
            "before the first edit): kept = share of neighborhood prompts whose comparison P(true) > P(new) came "
            "out as the original model's (probability comparison, teacher-forced), locality = share of target_true's "
            "positions whose argmax token is the original model's (EasyEdit's token accuracy, teacher-forced); "
            "retention = share of the earlier edits that took right after "
            "their batch and still hold; fluency = ROME's weighted bi-/tri-gram entropy (bits; x100 in tables) of "
            "sampled continuations of fixed neutral prompts; perplexity on WikiText-2 test tokens; norms are "
            "||Delta W||_F / ||W||_F of the accumulated update.")
