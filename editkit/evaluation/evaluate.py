"""Measure an edit: the same measurements before and after, for every method, and a PMET-Table-1-style summary.

`measure(lm, record)` reads the model at its current weights (teacher-forced NLLs and argmax tokens, sampled
generations); `compare_measurements(pre, post, record)` turns a pre/post pair into the metrics of metrics.py.
`evaluate(...)` runs methods over a shipped set in batches, appending one JSON line per record to a results file
so an interrupted run resumes where it stopped.
"""
from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path

import torch

from .. import isolation
from ..corpus import paragraphs
from ..editing.api import run_edit
from ..editing.hparams import load_hparams
from ..errors import EditkitError
from ..paths import cache_dir, safe_name
from ..scoring import score_targets
from .datasets import EvalRecord, load_eval_set
from .metrics import compare, harmonic_mean, idf_table, mean_ci, n_gram_entropy, tfidf_cosine, token_agreement

GEN_SEED = 0


@torch.no_grad()
def sample(lm, prompt: str, max_new_tokens: int, seed: int = GEN_SEED) -> str:
    """A top-k 5 sampled continuation, as ROME's generate_fast, with a fixed seed (the same before and after)."""
    batch = lm.tok(prompt, return_tensors="pt", add_special_tokens=True).to(lm.device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        out = lm.model.generate(**batch, do_sample=True, top_k=5, top_p=1.0, temperature=1.0,
                                max_new_tokens=max_new_tokens, pad_token_id=lm.tok.pad_token_id)
    return lm.tok.decode(out[0, batch["input_ids"].shape[1]:], skip_special_tokens=True)


def measure(lm, record: EvalRecord, n_gen: int = 1, gen_tokens: int = 40) -> dict:
    """Everything the metrics need, read at the model's current weights."""
    r = record.request
    groups = {"rewrite": [r.rewrite], "paraphrase": r.paraphrase_prompts, "neighborhood": r.neighborhood_prompts}
    out: dict = {}
    for group, prompts in groups.items():
        if not prompts:
            out[group] = {"nll_new": [], "nll_true": [], "acc_new": []}
            continue
        new = score_targets(lm, prompts, [r.target_new] * len(prompts))
        true = score_targets(lm, prompts, [r.target_true] * len(prompts)) if r.target_true else []
        out[group] = {"nll_new": [s.mean_nll for s in new], "nll_true": [s.mean_nll for s in true],
                      "acc_new": [s.accuracy for s in new]}
    if record.locality:
        scores = score_targets(lm, [p for p, _ in record.locality], [" " + a.strip() for _, a in record.locality])
        out["locality_argmax"] = [s.token_argmax for s in scores]
    gens = [r.generation_prompts[i] for i in range(min(n_gen, len(r.generation_prompts)))]
    out["generations"] = [{"prompt": p, "text": p + sample(lm, p, gen_tokens)} for p in gens]
    return out


def compare_measurements(pre: dict, post: dict, record: EvalRecord, idf: dict | None) -> dict:
    """CounterFact and EasyEdit metrics of one record (see metrics.py), pre- and post-edit."""
    m: dict = {}
    for when, meas in (("pre", pre), ("post", post)):
        for group, key, new_wins in (("rewrite", "efficacy", True), ("paraphrase", "generalization", True),
                                     ("neighborhood", "specificity", False)):
            g = meas[group]
            ok, mag = compare(g["nll_new"], g["nll_true"], new_wins) if g["nll_true"] else (math.nan, math.nan)
            m[f"{when}_{key}"], m[f"{when}_{key}_magnitude"] = ok, mag
        m[f"{when}_score"] = harmonic_mean([m[f"{when}_efficacy"], m[f"{when}_generalization"],
                                            m[f"{when}_specificity"]])
        texts = [g["text"] for g in meas["generations"]]
        m[f"{when}_fluency"] = n_gram_entropy(texts) if texts else math.nan
        m[f"{when}_consistency"] = (tfidf_cosine(" ".join(texts), record.reference_text, idf)
                                    if texts and record.reference_text and idf else math.nan)
        m[f"{when}_reliability"] = _mean(meas["rewrite"]["acc_new"])
        m[f"{when}_generalization_acc"] = _mean(meas["paraphrase"]["acc_new"])
    m["locality"] = token_agreement(pre.get("locality_argmax", []), post.get("locality_argmax", [])) \
        if pre.get("locality_argmax") else math.nan
    # neighborhood prompts score the true answer: their agreement is the locality when no locality prompt exists
    return m


def _mean(values):
    return sum(values) / len(values) if values else math.nan


_IDF: dict = {}


def wikitext_idf() -> dict:
    """idf over the shipped WikiText-2 paragraphs (both splits)."""
    if not _IDF:
        _IDF.update(idf_table(list(paragraphs("valid")) + list(paragraphs("test"))))
    return _IDF


def _hash(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:10]


def _read_jsonl(path: Path) -> dict:
    done = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                done[row["key"]] = row
            except (ValueError, KeyError):
                continue  # a line cut by an interruption: that record is recomputed
    return done


def _append(path: Path, row: dict) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(row, default=_json_default) + "\n")


def _json_default(x):
    if isinstance(x, float) and math.isnan(x):
        return None
    raise TypeError(type(x).__name__)


def evaluate(lm, methods: list[str], n: int = 100, batch: int = 1, set_name: str = "counterfact",
             n_gen: int = 1, gen_tokens: int = 40, hparams: dict | None = None, out_dir: str | Path | None = None,
             progress=None) -> dict:
    """Edit and measure `n` records of `set_name` with each method, `batch` requests per edit; resumable."""
    if batch < 1:
        raise EditkitError("the batch size must be at least 1")
    for method in methods:
        load_hparams(method, lm, (hparams or {}).get(method))  # fail early on an unknown method / bad hparams
    records = load_eval_set(set_name, n)
    out_dir = Path(out_dir) if out_dir else cache_dir("evaluations", safe_name(lm.name))
    out_dir.mkdir(parents=True, exist_ok=True)
    gen = {"n_gen": n_gen, "gen_tokens": gen_tokens, "seed": GEN_SEED, "sampling": "top-k 5"}
    idf = wikitext_idf()
    pre_path = out_dir / f"pre-{set_name}-{_hash(gen)}.jsonl"
    pre_done = _read_jsonl(pre_path)
    total = len(methods) * len(records)
    count = 0
    tables = {}
    for method in methods:
        hp = load_hparams(method, lm, (hparams or {}).get(method))
        run_key = {"model": lm.name, "method": method, "batch": batch, "set": set_name, "hparams": hp, **gen}
        path = out_dir / f"{method}-{set_name}-b{batch}-{_hash(run_key)}.jsonl"
        done = _read_jsonl(path)
        rows = []
        for start in range(0, len(records), batch):
            chunk = records[start:start + batch]
            keys = [str(r.request.case_id) for r in chunk]
            if all(k in done for k in keys):
                rows += [done[k] for k in keys]
                count += len(chunk)
                continue
            for rec, key in zip(chunk, keys):
                if key not in pre_done:
                    with isolation.session(lm):
                        pre_done[key] = {"key": key, "pre": measure(lm, rec, n_gen, gen_tokens)}
                    _append(pre_path, pre_done[key])
            if progress:
                progress(count / total, f"{method}: records {start + 1}-{start + len(chunk)} of {len(records)}")
            with isolation.session(lm):
                result = run_edit(lm, method, [r.request for r in chunk], (hparams or {}).get(method))
            seconds = result.seconds / len(chunk)
            rel = {k: v["relative_norm"] for k, v in result.info["norms"].items()}
            with isolation.session(lm, result.delta):
                posts = [measure(lm, rec, n_gen, gen_tokens) for rec in chunk]
            for rec, key, post in zip(chunk, keys, posts):
                row = {"key": key, "method": method, "case_id": rec.request.case_id, "seconds": seconds,
                       "relative_norm": rel, "metrics": compare_measurements(pre_done[key]["pre"], post, rec, idf),
                       "post_generations": post["generations"]}
                _append(path, row)
                rows.append(row)
            count += len(chunk)
        tables[method] = summarize(rows)
        tables[method]["results_file"] = str(path)
    if progress:
        progress(1.0, "evaluation done")
    return {"model": lm.name, "set": set_name, "n": len(records), "batch": batch, "generation": gen,
            "consistency_reference": "the records' attribute prompts completed with target_new (see datasets.py)",
            "methods": tables}


TABLE = [("score", "Score"), ("efficacy", "Efficacy"), ("generalization", "Generalization"),
         ("specificity", "Specificity"), ("fluency", "Fluency"), ("consistency", "Consistency")]


def summarize(rows: list[dict]) -> dict:
    """Mean and 95% half-width of each metric over records, pre and post (x100 for rates, as the papers)."""
    out = {"records": len(rows), "seconds_per_request": mean_ci([r["seconds"] for r in rows])[0]}
    keys = sorted({k for r in rows for k in r["metrics"]})
    for k in keys:
        scale = 100.0  # rates in %, n-gram entropy and TF-IDF cosine x 100, as ROME/MEMIT/PMET tables
        m, ci = mean_ci([r["metrics"][k] for r in rows if r["metrics"].get(k) is not None])
        out[k] = {"mean": m * scale if not math.isnan(m) else None,
                  "ci95": ci * scale if not math.isnan(ci) else None}
    # Score per record is a harmonic mean; the table's Score is the harmonic mean of the mean rates (as PMET)
    for when in ("pre", "post"):
        parts = [out.get(f"{when}_{k}", {}).get("mean") for k in ("efficacy", "generalization", "specificity")]
        out[f"{when}_table_score"] = harmonic_mean(parts) if all(p is not None for p in parts) else None
    return out
