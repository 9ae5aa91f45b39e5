"""Causal tracing speed and preview quality, measured in one run against ROME's algorithm with the same noise.

Per panel: the exact engine's seconds (plus the shared setup, as a panel traced alone would pay it), its fast mode's
seconds and largest score difference (bf16 matmuls, an approximation: engine.py), ROME's algorithm (logits at every
position, as kmeng01/rome) and its last-position variant, the ratios, the largest score difference, and the engine's
achieved GMAC/s for blocks and unembedding next to this CPU's matmul rate at the same shapes measured in the same run
(what bounds the panel). Then the severing chart, the total (setup + panels +
severing, panel by panel as the page streams them, and in one schedule as the CLI and the AIE run them), the preview
(attribution patching): its seconds and its Spearman rank correlation with each exact panel, on the prompt and on
the first `facts` known facts (their exact maps come from the shared result cache, computed when missing).
"""
from __future__ import annotations

import json
import time

import numpy as np
import torch

from ..core.paths import ASSETS
from ..model.hardware import fast_bf16, matmul_rates, measure_rate
from .attribution import METHODS, attribution, spearman
from .engine import Work, block_macs_per_token, fast_trace, fast_traces
from .reference import reference_trace
from .setup import TraceSetup
from .severing import sever
from .spec import TraceSpec


def matmul_rate(lm, rows: int = 860, repeat: int = 3) -> dict:
    """The model's device's fp32 rate now (GMAC/s) for a block-sized matmul (rows x d) @ (d x d_ff)
    (hardware.measure_rate) and, best of `repeat`, for the unembedding (rows x d) @ (d x V) done as the engine does
    it (runner.answer_logprob)."""
    d, f, dev = lm.adapter.d_model, lm.adapter.d_ff, lm.device
    h = torch.randn(rows, d, device=dev)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        lm.runner.answer_logprob(h, 0, norm=False)
        if dev.type == "cuda":  # a GPU runs asynchronously: wait for the product, not only its launch
            torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - t0)
    return {"block_matmul_gmac_per_s": round(measure_rate(torch.float32, dev, (rows, d, f)), 1),
            "unembed_gmac_per_s": round(rows * d * lm.adapter.vocab_size / min(times) / 1e9, 1)}


def softmax_rounding(lm, setup) -> dict:
    """How far float32 p(answer) is from float64 on this prompt's clean and corrupted final states: ROME's
    torch.softmax over the whole vocabulary (what the reference computes) and the engine's online logsumexp. On a
    262k vocabulary the float32 softmax sum is the larger error, so it bounds how closely any engine can match
    the reference."""
    L = lm.adapter.n_layers
    h = torch.cat([setup.clean[f"resid_post.{L - 1}"][:, -1], setup.corrupt[f"resid_post.{L - 1}"][:, -1]])
    a = setup.answer_id
    z = lm.runner.logits(h)
    exact = torch.log_softmax(z.double(), -1)[:, a].exp()
    ref = torch.softmax(z, -1)[:, a].double()
    mine = lm.runner.answer_logprob(h, a).exp().double()
    return {"reference_softmax_f32_max_abs_err": float((ref - exact).abs().max()),
            "engine_lse_f32_max_abs_err": float((mine - exact).abs().max())}



def _against_reference(lm, setup, kind: str, exact: torch.Tensor, fast_s: float, suffix: str) -> dict:
    """ROME's algorithm on one panel (with `suffix` "_last_only": logits at the last position only), timed: its
    seconds, the engine's speed-up over it and the largest score difference."""
    t0 = time.perf_counter()
    ref = reference_trace(lm, setup, kind, last_only=bool(suffix))
    ref_s = time.perf_counter() - t0
    return {f"reference{suffix}_s": round(ref_s, 2), f"ratio{suffix}": round(ref_s / fast_s, 2),
            f"max_abs_diff{suffix}": float((exact - ref).abs().max())}

def bench_trace(lm, prompt: str, subject: str, kinds=("hidden", "mlp", "attn"), samples: int = 10,
                last_only: bool = True, reference: bool | tuple = True, facts: int = 20, say=print) -> dict:
    """See module docstring. Returns a JSON-serializable report; `say(row)` is called as rows are measured.
    `reference`: ROME's algorithm on every panel (True), none (False) or the panels named (a tuple of kinds)."""
    ref_kinds = set(kinds) if reference is True else set(reference or ())
    t0 = time.perf_counter()
    setup = TraceSetup.build(lm, TraceSpec(prompt, subject, samples=samples))
    setup_s = time.perf_counter() - t0
    rate = matmul_rate(lm)
    rounding = softmax_rounding(lm, setup)
    bf16 = matmul_rates(lm.device)  # the fast mode is timed only where it runs (hardware.fast_bf16)
    fast = fast_bf16(lm.device)
    say({"setup_s": round(setup_s, 2), **rate, **rounding, "bf16": bf16.describe()})
    rows, exact = [], {}
    for kind in kinds:
        work = Work()
        t0 = time.perf_counter()
        exact[kind] = fast_trace(lm, setup, kind, work=work)
        engine_s = time.perf_counter() - t0
        fast_s = engine_s + setup_s
        row = {"kind": kind, "fast_s": round(fast_s, 2), "engine_s": round(engine_s, 2), **work.to_dict()}
        if fast:
            t0 = time.perf_counter()
            approx = fast_trace(lm, setup, kind, precision="bfloat16")
            row.update(bf16_engine_s=round(time.perf_counter() - t0, 2),
                       bf16_max_abs_diff=float((approx - exact[kind]).abs().max()))
        if kind in ref_kinds:
            row.update(_against_reference(lm, setup, kind, exact[kind], fast_s, ""))
        if kind in ref_kinds and last_only:
            row.update(_against_reference(lm, setup, kind, exact[kind], fast_s, "_last_only"))
        row["bound"] = _bound(row, rate)
        rows.append(row)
        say(row)
    t0 = time.perf_counter()
    sever(lm, setup, hidden=exact["hidden"].tolist() if "hidden" in exact else None)
    sever_s = time.perf_counter() - t0
    total = setup_s + sum(r["engine_s"] for r in rows) + sever_s
    t0 = time.perf_counter()
    together = fast_traces(lm, setup, kinds)
    sever(lm, setup, hidden=together["hidden"].tolist() if "hidden" in together else None)
    together_s = setup_s + time.perf_counter() - t0
    panels_s = setup_s + sum(r["engine_s"] for r in rows)
    bf16_s = round(setup_s + sum(r["bf16_engine_s"] for r in rows), 2) if fast else None
    say({"severing_s": round(sever_s, 2), "total_s": round(total, 2), "one_schedule_total_s": round(together_s, 2),
         "three_panels_s": round(panels_s, 2), "bf16_three_panels_s": bf16_s})
    preview = _preview(lm, prompt, subject, samples, exact, facts, say)
    return {"model": lm.name, "prompt": prompt, "subject": subject, "samples": samples, "threads":
            torch.get_num_threads(), "setup_s": round(setup_s, 2), "tokens": len(setup.tokens),
            "layers": lm.adapter.n_layers, "block_macs_per_token": block_macs_per_token(lm, 0),
            "severing_s": round(sever_s, 2), "total_s": round(total, 2), "one_schedule_total_s": round(together_s, 2),
            "three_panels_s": round(panels_s, 2), "bf16_three_panels_s": bf16_s, "bf16_rates": bf16.describe(),
            **rate, **rounding, "preview": preview,
            "results": rows}


def _bound(row: dict, rate: dict) -> str:
    """Which part dominates the panel's time and how close it runs to the CPU's matmul rate at its shapes."""
    parts = {"blocks": (row["block_s"], row["block_gmac_per_s"], rate["block_matmul_gmac_per_s"]),
             "unembedding": (row["unembed_s"], row["unembed_gmac_per_s"], rate["unembed_gmac_per_s"])}
    name, (seconds, achieved, peak) = max(parts.items(), key=lambda kv: kv[1][0])
    share = seconds / max(row["engine_s"], 1e-9)
    eff = f"{achieved / peak:.0%} of the matmul rate" if achieved and peak else "rate unknown"
    return f"{name}: {share:.0%} of the engine's time, at {achieved} GMAC/s ({eff})"


def _preview(lm, prompt, subject, samples, exact, n_facts, say) -> dict:
    """The preview as the page computes it (the setup with the kept forward + one backward), its seconds, and its
    Spearman correlation with each exact panel, over all cells and over the cells from the subject on (before the
    subject both maps equal the corrupted score), for every gradient point (attribution.METHODS; the page uses
    "corrupted", standard AtP), on the prompt and on the first `n_facts` known facts."""
    from ..data.facts import predicted_facts
    from .tracer import Tracer

    kinds = list(exact)
    t0 = time.perf_counter()
    setup = TraceSetup.build(lm, TraceSpec(prompt, subject, samples=samples), gradients=True)
    est = {"corrupted": attribution(lm, setup, kinds)}
    out = {"seconds_with_setup": round(time.perf_counter() - t0, 2)}
    for method in METHODS[1:]:
        est[method] = attribution(lm, setup, kinds, method=method)
    out["spearman"] = {m: _spearmans(est[m], exact, setup.subject_range[0]) for m in METHODS}
    say({"preview_s": out["seconds_with_setup"], "spearman": out["spearman"]["corrupted"]})
    facts = predicted_facts(lm)[:n_facts] if n_facts else []
    if facts:
        per = {m: [] for m in METHODS}
        for fact in facts:
            tracer = Tracer(lm, TraceSpec(fact["prompt"], fact["subject"], samples=samples))
            maps = {k: torch.tensor(tracer.result(k).scores) for k in kinds}  # from the shared cache if traced
            for method in METHODS:
                per[method].append(_spearmans(attribution(lm, tracer.setup, kinds, method=method), maps,
                                              tracer.setup.subject_range[0]))
        out["facts"] = len(facts)
        out["facts_spearman_mean"] = {m: {k: {which: round(float(np.nanmean([r[k][which] for r in rows])), 3)
                                              for which in ("all", "from_subject")} for k in kinds}
                                      for m, rows in per.items()}
        out["facts_spearman_min"] = {m: {k: round(float(np.nanmin([r[k]["from_subject"] for r in rows])), 3)
                                         for k in kinds} for m, rows in per.items()}
        say({"facts": len(facts), "spearman_mean": out["facts_spearman_mean"]["corrupted"]})
    return out


def _spearmans(est: dict, exact: dict, b: int) -> dict:
    return {k: {"all": round(spearman(est[k], exact[k]), 3),
                "from_subject": round(spearman(est[k][b:], torch.as_tensor(exact[k])[b:]), 3)} for k in exact}


# --- the preview's agreement -------------------------------------------------------------------------------
def preview_agreement(lm, n_facts: int = 20, samples: int = TraceSpec.samples, say=print) -> dict:
    """The preview (attribution patching) against the exact panels on the first `n_facts` known facts the
    model predicts (the exact panels from the shared result cache, computed when missing, all three in one
    schedule), as the API and the page compute both (Tracer.preview, Tracer.results), compared by
    agreement.compare. Returns the rows and the per-panel summary (agreement.summarize)."""
    from ..core.errors import EditkitError
    from ..data.facts import predicted_facts
    from ..model.sites import TRACE_KINDS
    from .agreement import compare, summarize
    from .tracer import Tracer

    facts = predicted_facts(lm, n_facts)
    if not facts:
        raise EditkitError(f"{lm.name} predicts none of the known facts: no exact panels to compare the "
                           "preview with")
    kinds, rows, t0 = list(TRACE_KINDS), [], time.perf_counter()
    for fact in facts:
        tracer = Tracer(lm, TraceSpec(fact["prompt"], fact["subject"], samples=samples))
        exact = tracer.results(kinds, together=True)
        preview = tracer.preview(kinds)
        first = exact.first.subject_range[0]
        row = {"prompt": fact["prompt"], "subject": fact["subject"], "answer": exact.answer,
               "panels": {k: compare(preview[k].scores, exact[k].scores, first) for k in kinds}}
        rows.append(row)
        say({"fact": fact["prompt"], **{k: v["spearman"] for k, v in row["panels"].items()}})
    return {"model": lm.name, "facts": len(rows), "samples": samples, "method": "corrupted (AtP)",
            "seconds": round(time.perf_counter() - t0, 1), "threads": torch.get_num_threads(),
            "panels": summarize(rows, kinds), "rows": rows}


# --- the fast mode's error ---------------------------------------------------------------------------------------
FAST_ERRORS = ASSETS / "results"  # trace-fast-<model>.json: `python -m editkit bench fast --save ...`


def fast_mode_error(lm, n_facts: int = 20, samples: int = 10, kinds=("hidden", "mlp", "attn"), say=print) -> dict:
    """The fast mode's largest |score difference| from the exact engine (engine.py), per panel and over the first
    `n_facts` known facts the model predicts (their exact panels from the shared result cache, computed when
    missing), with both engines' seconds: the number a fast figure is shown with."""
    from ..core.errors import EditkitError
    from ..data.facts import predicted_facts
    from .tracer import Tracer

    if not fast_bf16(lm.device):  # hours of bf16 at the slow path's rate, for a mode the machine never runs
        raise EditkitError(f"the fast mode is off on this machine ({matmul_rates(lm.device).describe()}): its "
                           "error is measured where bf16 matmuls are fast (the shipped measurements: "
                           "assets/results/trace-fast-*.json; EDITKIT_FAST_BF16=on measures it here anyway)")
    facts = predicted_facts(lm, n_facts)
    if not facts:
        raise EditkitError(f"{lm.name} predicts none of the known facts: no exact panels to compare its fast mode with")
    rows = []
    for fact in facts:
        spec = dict(prompt=fact["prompt"], subject=fact["subject"], samples=samples, kinds=tuple(kinds))
        exact, fast = Tracer(lm, TraceSpec(**spec)), Tracer(lm, TraceSpec(**spec, precision="bfloat16"), cache=False)
        row = {"prompt": fact["prompt"], "subject": fact["subject"], "max_abs_diff": {}, "exact_s": 0.0, "fast_s": 0.0}
        for kind in kinds:
            a, b = exact.result(kind), fast.result(kind)
            row["max_abs_diff"][kind] = float((torch.tensor(a.scores) - torch.tensor(b.scores)).abs().max())
            row["exact_s"] += 0.0 if a.cached else a.seconds
            row["fast_s"] += b.seconds
        rows.append(row)
        say({"fact": fact["prompt"], **row["max_abs_diff"]})
    worst = {k: max(r["max_abs_diff"][k] for r in rows) for k in kinds}
    return {"model": lm.name, "facts": len(rows), "samples": samples, "precision": "bfloat16",
            "max_abs_diff": max(worst.values()), "max_abs_diff_per_kind": worst,
            "mean_max_abs_diff": float(np.mean([max(r["max_abs_diff"].values()) for r in rows])),
            "threads": torch.get_num_threads(), "rows": rows}


def shipped_fast_error(model: str) -> dict | None:
    """The fast mode's measured error on `model` (fast_mode_error, shipped as assets/results/trace-fast-<model>.json),
    or None when it was not measured on that model."""
    path = FAST_ERRORS / f"trace-fast-{model}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def fast_note(model: str) -> str:
    """What a fast-mode figure says about itself, in one sentence."""
    e = shipped_fast_error(model)
    bound = (f"over {e['facts']} known facts its scores differ from the exact engine's by at most "
             f"{e['max_abs_diff']:.3f} (mean of the per-fact maxima {e['mean_max_abs_diff']:.3f})" if e else
             f"its error is not measured on {model} (python -m editkit bench fast)")
    return f"Fast mode: an approximation (bf16 matmuls in the restored runs); {bound}."
