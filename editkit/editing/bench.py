"""Editing speed: a one-request edit with every registered method, and a batch for the batch methods, on the same
held-out CounterFact requests, with what each method caches per model (statistics, context templates) computed
first. Each row reports wall and CPU seconds (on a shared machine the wall time also measures the others' load), the
target optimisation's time per step and steps, and the efficacy and generalization reached. The reference run
times the first method once more with its target optimisation on the plain full model (the fast path's speed-up)."""
from __future__ import annotations

import time

from ..core.errors import EditkitError
from ..core.paths import DATA
from ..model.scoring import score_targets
from ..model.weights import applied
from .defaults import load_hparams
from .methods import all_methods, get
from .requests import parse_requests
from .run import prepare_first_use, run_edit

DARRIEUX = {"prompt": "The mother tongue of {} is", "subject": "Danielle Darrieux", "target_new": "English",
            "target_true": "French", "paraphrase_prompts": ["Danielle Darrieux, a native speaker of",
                                                            "Where Danielle Darrieux grew up, people speak"]}


def efficacy(lm, requests) -> float:
    """Share of requests whose rewrite prompt now prefers target_new over target_true."""
    prompts = [r.rewrite for r in requests for _ in (0, 1)]
    targets = [t for r in requests for t in (r.target_new, r.target_true)]
    s = score_targets(lm, prompts, targets)
    return sum(s[2 * i].logprob > s[2 * i + 1].logprob for i in range(len(requests))) / len(requests)


def generalization(lm, requests) -> float | None:
    """Share of paraphrase prompts that now prefer target_new over target_true (mean per-token NLL, CounterFact)."""
    pairs = [(p, r) for r in requests for p in r.paraphrase_prompts]
    if not pairs:
        return None
    new = score_targets(lm, [p for p, _ in pairs], [r.target_new for _, r in pairs])
    true = score_targets(lm, [p for p, _ in pairs], [r.target_true for _, r in pairs])
    return sum(a.mean_nll < b.mean_nll for a, b in zip(new, true)) / len(pairs)


def _timed(lm, method: str, requests, reference: bool = False, overrides: dict | None = None) -> dict:
    cpu = time.process_time()
    result = run_edit(lm, method, requests, overrides, reference=reference)
    cpu = time.process_time() - cpu
    with applied(lm, result.delta):
        eff, gen = efficacy(lm, requests), generalization(lm, requests)
    steps = [r.steps for r in result.per_request]
    t_targets = None if result.seconds_targets is None else round(result.seconds_targets, 2)
    return {"method": method + (" (reference)" if reference else ""), "requests": len(requests),
            "seconds": round(result.seconds, 2), "cpu_seconds": round(cpu, 2), "seconds_targets": t_targets,
            "seconds_per_step": round(t_targets / max(steps), 3) if t_targets and max(steps) else None,
            "steps": max(steps), "steps_per_request": steps, "efficacy": eff, "generalization": gen}


def _warm_up(lm, chosen, requests, overrides: dict | None) -> float | None:
    """One untimed edit with the first method on a request no timed run uses: a device's first kernel use (a GPU's
    libraries, the allocator) would otherwise land on whichever method is timed first (Speed page, the second GPU
    session)."""
    if not chosen or not requests:
        return None
    t0 = time.perf_counter()
    run_edit(lm, chosen[0].name, requests, overrides)
    return round(time.perf_counter() - t0, 2)


def bench_edit(lm, n: int = 10, reference: bool = True, methods: list[str] | None = None, say=print,
               overrides: dict | None = None) -> dict:
    """Time each method on one request (Darrieux) and the batch methods on `n` CounterFact requests, after one
    untimed warm-up edit (`warmup_s`); `reference` also times the first method with the target optimisation on the
    full model (the speed-up of the fast path). `overrides` (hyperparameters every method shares, e.g. an
    early-stopping rule) apply to every run."""
    if n < 1:
        raise EditkitError(f"the batch needs at least 1 request, not {n}")
    wanted = None if methods is None else {get(name).name for name in methods}  # an unknown name is an error
    chosen = [m for m in all_methods() if wanted is None or m.name in wanted]  # in the registry's order
    if not chosen:
        raise EditkitError("no method to time")
    t0 = time.perf_counter()
    for m in chosen:
        prepare_first_use(lm, load_hparams(m.name, lm), method=m.name)
    stats_s = time.perf_counter() - t0
    one = parse_requests(DARRIEUX)
    records = parse_requests(DATA / "counterfact" / "counterfact_500.json")
    if n >= len(records):  # the warm-up takes the record after the batch
        raise EditkitError(f"the batch takes at most {len(records) - 1} of the {len(records)} CounterFact records")
    batch = records[:n]
    warmup_s = _warm_up(lm, chosen, records[n:n + 1], overrides)
    runs = [(m.name, one, False) for m in chosen] + [(m.name, batch, False) for m in chosen if m.batch]
    if reference and chosen:
        runs.insert(1, (chosen[0].name, one, True))
    rows = []
    for method, requests, ref in runs:
        rows.append(_timed(lm, method, requests, ref, overrides))
        say(rows[-1])
    out = {"model": lm.name, "statistics_s": round(stats_s, 2), "warmup_s": warmup_s, "results": rows}
    if overrides:
        out["overrides"] = dict(overrides)
    if reference and chosen:
        out["reference_method"] = chosen[0].name
        out[f"{chosen[0].name}_speedup"] = round(rows[1]["seconds"] / max(rows[0]["seconds"], 1e-9), 2)
    return out
