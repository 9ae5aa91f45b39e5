"""Measure one record before or after an edit, and one batch edited and measured.

`measure(lm, record)` reads the model at its current weights (teacher-forced NLLs and argmax tokens, sampled
generations); `record_metrics(pre, post, record)` turns a pre/post pair into the metrics of metrics.py;
`edit_and_measure(lm, method, records)` edits one batch and measures it (no files: for the app and the work items).

Generations (fluency, consistency): ROME samples one 100-token continuation per generation prompt (top-k 5) for
each of the 10 prompts of a record. That is slow on a CPU, so editkit defaults to `n_gen=1` prompt and
`gen_tokens=40` new tokens, sampled top-k 5 with a fixed seed (the same before and after the edit); the output
states the setting. Shorter generations have lower n-gram entropy, so compare fluency only at equal settings.
The idf of the consistency score is fit on the shipped WikiText-2 paragraphs (ROME's idf.npy is not shipped).

Generation-based efficacy (QAEdit; metrics.generation_success): the rewrite and paraphrase prompts are continued
greedily for `greedy_tokens` tokens (default 12) before and after the edit; 0 turns the check off.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from ..core.errors import EditkitError
from ..data.corpus import paragraphs
from ..editing.run import run_edit
from ..model import isolation
from ..model.decoding import Decoding
from ..model.scoring import score_targets
from ..model.text import sample as text_sample
from .datasets import EvalRecord, as_record
from .metrics import (
    EditMetrics,
    compare,
    generation_success,
    harmonic_mean,
    idf_table,
    n_gram_entropy,
    nan_to_none,
    tfidf_cosine,
    token_agreement,
)

GEN_SEED = 0
FORMAT = 3  # results-file format: bump when measure/metrics change, so old results are not resumed
N_GEN = 1
GEN_TOKENS = 40
GREEDY_TOKENS = 12  # greedy continuation length for the generation-based efficacy


@dataclass(frozen=True)
class EvalSpec:
    """What a batch evaluation edits and measures: the first `n` records of `set_name` (a shipped set or a records
    file; n None: all of them), `batch` requests per edit, `n_gen` sampled generations of `gen_tokens` tokens per
    record (fluency, consistency) and greedy continuations of `greedy_tokens` tokens of the rewrite and paraphrase
    prompts (generation-based efficacy; 0: off). A sweep leaves `batch` None for the method's own default."""

    set_name: str = "counterfact"
    n: int | None = 100
    batch: int | None = 1
    n_gen: int = N_GEN
    gen_tokens: int = GEN_TOKENS
    greedy_tokens: int = GREEDY_TOKENS


def sample(lm, prompt: str, max_new_tokens: int, seed: int = GEN_SEED) -> str:
    """A top-k 5 sampled continuation, as ROME's generate_fast, with a fixed seed (the same before and after; a
    private random stream, so concurrent sessions never disturb each other's samples)."""
    return text_sample(lm, prompt, max_new_tokens, seed=seed, top_k=5)


def greedy(lm, prompts: list[str], max_new_tokens: int) -> list[str]:
    """Greedy continuations (new text only) of a batch of prompts, left-padded so every row ends at its prompt."""
    if not prompts:
        return []
    return list(lm.runner.complete(list(prompts), Decoding.greedy(max_new_tokens)))


def measure(lm, record, n_gen: int = N_GEN, gen_tokens: int = GEN_TOKENS,
            greedy_tokens: int = GREEDY_TOKENS) -> dict:
    """Everything the metrics need, read at the model's current weights (JSON-serializable)."""
    record = as_record(record)
    r = record.request
    groups = {"rewrite": [r.rewrite], "paraphrase": r.paraphrase_prompts, "neighborhood": r.neighborhood_prompts}
    # every (prompt, target) pair scored once, in one batched run (score_targets: 16 rows a forward pass)
    pairs = [(p, t) for prompts in groups.values() for t in (r.target_new, r.target_true) if t for p in prompts]
    pairs += [(p, a) for p, a in record.locality or []]
    pairs = list(dict.fromkeys(pairs))
    scored = dict(zip(pairs, score_targets(lm, [p for p, _ in pairs], [t for _, t in pairs]))) if pairs else {}
    out: dict = {}
    true_scores = {}
    for group, prompts in groups.items():
        new = [scored[(p, r.target_new)] for p in prompts]
        true = [scored[(p, r.target_true)] for p in prompts] if r.target_true else []
        true_scores[group] = true
        out[group] = {"prompts": list(prompts), "nll_new": [s.mean_nll for s in new],
                      "nll_true": [s.mean_nll for s in true], "acc_new": [s.accuracy for s in new],
                      "p_new": [s.prob for s in new], "p_true": [s.prob for s in true]}
    if record.locality:
        scores = [scored[(p, a)] for p, a in record.locality]
        out["locality_argmax"] = [s.token_argmax for s in scores]
        out["locality_acc"] = [s.accuracy for s in scores]
    elif r.target_true:  # EasyEdit's CounterFact locality: the neighborhood prompts, target_true as the answer
        out["locality_argmax"] = [s.token_argmax for s in true_scores.get("neighborhood", [])]
    gens = r.generation_prompts[:max(n_gen, 0)]
    out["generations"] = [{"prompt": p, "text": p + sample(lm, p, gen_tokens)} for p in gens] if gen_tokens else []
    if greedy_tokens:
        prompts = [r.rewrite] + list(r.paraphrase_prompts)
        texts = greedy(lm, prompts, greedy_tokens)
        out["greedy"] = {"rewrite": texts[:1], "paraphrase": texts[1:]}
    return out


def probabilities(meas: dict) -> dict:
    """Per prompt group, [{"prompt", "p_new", "p_true"?}]: P(target) of each target after each prompt (teacher
    forced, the product of its token probabilities), from a measurement."""
    out = {}
    for group in ("rewrite", "paraphrase", "neighborhood"):
        g = meas[group]
        out[group] = [{"prompt": p, "p_new": g["p_new"][i], **({"p_true": g["p_true"][i]} if g["p_true"] else {})}
                      for i, p in enumerate(g["prompts"])]
    return out


def _mean(values):
    return sum(values) / len(values) if values else math.nan


def metrics_of(meas: dict, record: EvalRecord, idf: dict | None) -> EditMetrics:
    """The metrics of one measurement (see metrics.py); None where the record lacks the data."""
    m = EditMetrics()
    if record.kind == "zsre":  # ROME/MEMIT zsRE: top-1 token accuracies
        m.efficacy = _mean(meas["rewrite"]["acc_new"])
        m.generalization = _mean(meas["paraphrase"]["acc_new"])
        m.specificity = _mean(meas.get("locality_acc", []))
    else:
        for group, key, new_wins in (("rewrite", "efficacy", True), ("paraphrase", "generalization", True),
                                     ("neighborhood", "specificity", False)):
            g = meas[group]
            ok, mag = compare(g["nll_new"], g["nll_true"], new_wins) if g["nll_true"] else (math.nan, math.nan)
            setattr(m, key, ok)
            setattr(m, f"{key}_magnitude", mag)
    rates = [m.efficacy, m.generalization, m.specificity]
    m.score = harmonic_mean(rates) if not any(math.isnan(x) for x in rates) else math.nan
    texts = [g["text"] for g in meas["generations"]]
    m.fluency = n_gram_entropy(texts) if texts else None
    m.consistency = (tfidf_cosine(" ".join(texts), record.reference_text, idf)
                     if texts and record.reference_text and idf else None)
    if "greedy" in meas:
        for group, key in (("rewrite", "gen_efficacy"), ("paraphrase", "gen_generalization")):
            hits = [generation_success(t, record.request.target_new, record.request.target_true)
                    for t in meas["greedy"][group]]
            setattr(m, key, _mean(hits))
    m.reliability = _mean(meas["rewrite"]["acc_new"])
    m.generalization_acc = _mean(meas["paraphrase"]["acc_new"])
    for k, v in m.to_dict().items():
        setattr(m, k, nan_to_none(v))
    return m


def record_metrics(pre: dict, post: dict, record, idf: dict | None) -> dict:
    """Flat {"pre_<metric>": .., "post_<metric>": .., "locality": ..} for one record (None = unavailable).
    Locality (EasyEdit) = share of the locality answers' positions whose argmax the edit left unchanged (CounterFact
    records without locality prompts: the neighborhood prompts with target_true, as EasyEdit scores CounterFact)."""
    record = as_record(record)
    out = {}
    for when, meas in (("pre", pre), ("post", post)):
        out.update({f"{when}_{k}": v for k, v in metrics_of(meas, record, idf).to_dict().items()})
    out["locality"] = nan_to_none(token_agreement(pre.get("locality_argmax", []), post.get("locality_argmax", [])))
    return out


_IDF: dict = {}
_IDF_LOCK = threading.Lock()  # sessions opening Edit & compare at once compute it once


def wikitext_idf() -> dict:
    """idf over the shipped WikiText-2 paragraphs (both splits)."""
    with _IDF_LOCK:
        if not _IDF:
            _IDF.update(idf_table(list(paragraphs("valid")) + list(paragraphs("test"))))
    return _IDF


def edit_and_measure(lm, method: str, records, hparams: dict | None = None, spec: EvalSpec = EvalSpec(),
                     pre: list[dict] | None = None, keep: dict | None = None, progress=None) -> list[dict]:
    """Edit `records` in one batch with `method` and measure each before and after, with `spec`'s generation
    settings (n_gen, gen_tokens, greedy_tokens). The model is unchanged afterwards. One row per record: case_id,
    seconds (edit time / batch size), relative_norm per edited matrix, metrics (record_metrics), pre / post
    measurements (with the generated texts). `keep["result"]` receives the EditResult (its delta and diagnostics),
    when a dict is given."""
    records = [as_record(r) for r in records]
    if not records:
        raise EditkitError("no records to edit")
    idf = wikitext_idf()
    gen = (spec.n_gen, spec.gen_tokens, spec.greedy_tokens)
    if pre is None:
        pre = [measure(lm, rec, *gen) for rec in records]
    result = run_edit(lm, method, [r.request for r in records], hparams, progress=progress)
    if keep is not None:
        keep["result"] = result
    seconds = result.seconds / len(records)
    rel = {k: v["relative_norm"] for k, v in result.info.get("norms", {}).items()}
    with isolation.session(lm, result.delta):
        posts = [measure(lm, rec, *gen) for rec in records]
    return [{"method": method, "case_id": rec.request.case_id, "seconds": seconds, "relative_norm": rel,
             "metrics": record_metrics(p, q, rec, idf), "pre": p, "post": q}
            for rec, p, q in zip(records, pre, posts)]
